"""Findings and conclusion of the transfer study: optimal η_c per depth against the limits'
optimum, its drift with depth, the two-layer-block rules (eq. 8) and the horizon T.

Every verdict is computed from a 95% bootstrap interval (seeds for networks, the
1/L-fit residuals or the Monte Carlo bound for limits), whichever way it comes out.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from ._report import Finding
from ._study_transfer_fit import Optimum, compare_optima, drift, spread
from ._study_transfer_optima import (T_lim_optimum, T_net_optimum, limit_inf, net_optima,
                                     seed_matrix, two_optima)

__all__ = ["summarize_transfer", "conclude_transfer"]

_METRICS = {"train": "running-mean train loss (last K/4 steps)",
            "probe": "probe loss after K steps"}
_TRANSFER = "one η* at every depth (depth-μP transfer; papers 000, 001)"
_OPEN = "open (grid end)"


def _ends(ci: tuple[float, float]) -> tuple[str, str]:
    """Text for interval ends beyond the grid (infinite in log)."""
    return tuple(_OPEN if not math.isfinite(x) else "" for x in ci)


def _exp_finding(observable: str, quantity: str, opt: Optimum, claim: str,
                 verdict: str) -> Finding:
    """A finding for exp(optimum) (an η_c or a T), open interval ends named; an
    optimum beyond the grid is not resolved, and the verdict says on which side."""
    lo, hi = opt.ci()
    resolved = math.isfinite(opt.estimate)
    if not resolved:
        side = "low" if opt.estimate < 0 else "high"
        verdict = (f"not resolved: the minimum lies at the {side} end of the grid"
                   if not math.isnan(opt.estimate) else "not resolved: no finite loss")
    return Finding(observable, quantity, math.exp(opt.estimate) if resolved else math.nan,
                   (math.exp(lo), math.exp(hi)), claim, verdict, resolved=resolved,
                   open_ends=_ends((lo, hi)))


def _overlap(a: Optimum, b: Optimum) -> str:
    """Whether the 95% intervals of two optima overlap, or which lies above."""
    (alo, ahi), (blo, bhi) = a.ci(), b.ci()
    if not (math.isfinite(blo) or math.isfinite(bhi)):
        return "no comparison: the limit's interval is open on both sides"
    if ahi < blo:
        return "below the limit's η*: the intervals are disjoint"
    if alo > bhi:
        return "above the limit's η*: the intervals are disjoint"
    return "consistent with the limit's η* (the intervals overlap)"


def _signed(observable: str, quantity: str, opt: Optimum, claim: str,
            words: tuple[str, str, str], scale: float = 1.0) -> Finding:
    """A finding for a signed quantity: ``words`` = verdicts for an interval above
    0, below 0, and containing 0."""
    lo, hi = opt.ci()
    verdict = words[0] if lo > 0 else words[1] if hi < 0 else words[2]
    resolved = math.isfinite(opt.estimate) and (math.isfinite(lo) or math.isfinite(hi))
    if not resolved:
        verdict = "not resolved: optima beyond the grid's end (estimate or bootstrap)"
    return Finding(observable, quantity, scale * opt.estimate, (scale * lo, scale * hi),
                   claim, verdict, resolved=resolved, open_ends=_ends((lo, hi)))


def _depth_findings(ds: xr.Dataset, dataset: str, metric: str, widths: list[int],
                    lim: Optimum | None) -> list[Finding]:
    """η* per width and depth of the one-layer networks, its drift per doubling of
    L, and (widest width) whether it approaches the limit's η* with depth."""
    out = []
    widest = None
    for n in widths:
        opts = net_optima(ds, dataset, metric, n)
        if not opts:
            continue
        widest = (n, opts)
        what = f"{dataset}, one-layer blocks, n = {n}, {_METRICS[metric]}"
        for L, opt in opts.items():
            verdict = _overlap(opt, lim) if lim is not None else "no limit run"
            out.append(_exp_finding(what, f"optimal η_c at L = {L}", opt, _TRANSFER, verdict))
        Ls = np.log2(np.array(list(opts), float))
        out.append(_signed(what, "drift: Δlog₂ η* per doubling of L", drift(Ls, list(opts.values())),
                           "0 (transfer)", ("η* grows with depth", "η* falls with depth",
                                            "consistent with 0: η* transfers across depth")))
    if widest is not None and lim is not None:
        n, opts = widest
        first, last = min(opts), max(opts)
        near = [compare_optima(opts[L], lim) for L in (first, last)]
        with np.errstate(invalid="ignore"):  # both beyond the grid: NaN (unknown)
            delta = Optimum(abs(near[0].estimate) - abs(near[1].estimate),
                            np.abs(near[0].replicates) - np.abs(near[1].replicates))
        out.append(_signed(
            f"{dataset}, one-layer blocks, n = {n}, {_METRICS[metric]}",
            f"distance d(L) = abs(log η*(L) − log η*∞): d({first}) − d({last})", delta,
            "η* approaches the limit's as L grows (paper 002, Theorem 1)",
            (f"approaches the limit's η* from L = {first} to {last}",
             f"moves away from the limit's η* from L = {first} to {last}",
             "no change in the distance to the limit's η* resolved")))
    return out


def _limit_findings(ds: xr.Dataset, dataset: str, metric: str) -> tuple[list, Optimum | None]:
    """The limits' η* extrapolated to L → ∞; returns the findings and the coupled
    limit's optimum (the limit of ordinary backprop), None if not run."""
    out, coupled = [], None
    Ls = ", ".join(str(v) for v in ds["steps"].values.tolist())
    for b in ds["backward"].values.tolist():
        res = limit_inf(ds, dataset, b, metric)
        if res is None:
            continue
        opt = res[0]
        coupled = opt if b == "coupled" else coupled
        out.append(_exp_finding(
            f"{dataset}, limit backward={b!r}, {_METRICS[metric]}, a + b/L fit over L = {Ls}",
            "optimal η_c at L = ∞", opt, "the limit predicts the networks' η* (n, L → ∞)",
            "interval from the residuals of the 1/L fit (parametric bootstrap, Student-t)"))
    return out, coupled


def _two_layer_findings(ds: xr.Dataset, metric: str) -> list[Finding]:
    """Spread and drift of η* across depths under each first-layer rule, and the
    difference of the spreads."""
    out, spreads = [], {}
    Ls = ds["depth"].values
    claim = ("depth-μP: η* moves with depth; depth-aware η₁ = η_c n√L (eq. 8): one η* "
             "(paper 002, Fig. 5)")
    for rule in ds["first_layer_lr"].values.tolist():
        opts = two_optima(ds, rule, metric)
        what = f"digits, two-layer blocks (eq. 6), η₁ {rule}, {_METRICS[metric]}"
        spreads[rule] = spread(list(opts.values()))
        lo, hi = spreads[rule].ci()
        out.append(Finding(what, "spread max η* / min η* over depths",
                           math.exp(spreads[rule].estimate), (math.exp(lo), math.exp(hi)),
                           claim, "1 = perfect transfer (seed noise alone makes it > 1; "
                           "compare the two rules below)",
                           resolved=math.isfinite(spreads[rule].estimate),
                           open_ends=_ends((lo, hi))))
        out.append(_signed(what, "drift: Δlog₂ η* per doubling of L",
                           drift(np.log2(Ls[np.isin(Ls, list(opts))].astype(float)),
                                 list(opts.values())), claim,
                           ("η* grows with depth", "η* falls with depth",
                            "consistent with 0: η* transfers across depth")))
    if len(spreads) == 2:
        out.append(_best_loss_finding(ds, metric, claim))
        diff = compare_optima(spreads["depth-mup"], spreads["depth-aware"])
        out.append(_signed(f"digits, two-layer blocks, {_METRICS[metric]}",
                           "log spread(depth-μP) − log spread(depth-aware)", diff, claim,
                           ("depth-aware η₁ transfers better (smaller spread)",
                            "depth-μP transfers better (smaller spread)",
                            "no difference in spread resolved")))
    return out


def _boot_min(per_seed: np.ndarray, rng: np.random.Generator, n_boot: int = 1000):
    """min over the grid of the seed-mean curve of (seed, grid) values, and its
    replicates over resampled seeds (NaN grid points, i.e. diverged, skipped)."""
    S = per_seed.shape[0]
    reps = [np.nanmin(per_seed[rng.integers(0, S, S)].mean(0)) for _ in range(n_boot)]
    return float(np.nanmin(per_seed.mean(0))), np.array(reps)


def _best_loss_finding(ds: xr.Dataset, metric: str, claim: str) -> Finding:
    """The lowest loss over η_c at the deepest depth, depth-aware minus depth-μP,
    with a bootstrap over seeds (each rule's seeds resampled on their own)."""
    L = int(ds["depth"].values.max())
    rng = np.random.default_rng(0)
    best = {rule: _boot_min(seed_matrix(ds[f"two_{metric}"].sel(first_layer_lr=rule,
                                                                 depth=L)), rng)
            for rule in ("depth-aware", "depth-mup")}
    diff = Optimum(best["depth-aware"][0] - best["depth-mup"][0],
                   best["depth-aware"][1] - best["depth-mup"][1])
    return _signed(f"digits, two-layer blocks, L = {L}, {_METRICS[metric]}",
                   "lowest loss over η_c: depth-aware − depth-μP", diff,
                   "eq. 8 lowers the loss at depth (paper 002, Fig. 5, row 3)",
                   ("depth-aware is worse at its best η_c", "depth-aware reaches a lower loss",
                    "no difference in the lowest loss resolved"))


def _horizon_findings(ds: xr.Dataset, metric: str) -> list[Finding]:
    """Optimal T of the networks and of the coupled limit at the networks' depth
    and beyond; the loss at the largest T against T = 1."""
    L = int(ds.attrs["T_depth"])
    claim = "moderate T > 1 helps, large T destabilises (paper 002, Fig. 2)"
    words = lambda opt: ("moderate T helps: T* > 1" if opt.ci()[0] > 0 else  # noqa: E731
                         "T* < 1" if opt.ci()[1] < 0 else "consistent with T* = 1")
    net = T_net_optimum(ds, metric)
    out = [_exp_finding(f"digits, networks L = {L}, n = {ds.attrs['T_width']}, η_c = "
                        f"{ds.attrs['T_eta']}, {_METRICS[metric]}", "optimal T", net, claim,
                        words(net))]
    for Ls in ds["T_steps"].values.tolist():
        opt = T_lim_optimum(ds, metric, Ls)
        out.append(_exp_finding(f"digits, coupled limit L = {Ls}, η_c = {ds.attrs['T_eta']}, "
                                f"{_METRICS[metric]}", "optimal T", opt, claim, words(opt)))
    per_seed = ds[f"T_net_{metric}"].transpose("seed", "T").values
    per_seed = per_seed[~np.isnan(per_seed).all(1)]
    T = ds["T"].values
    big, one = int(np.argmax(T)), int(np.argmin(abs(T - 1.0)))
    out.append(_best_T_finding(per_seed, T, one, L, metric, claim))
    if np.isnan(per_seed[:, big]).any():
        diverged = T[np.isnan(per_seed).any(0)]
        out.append(Finding(f"digits, networks L = {L}", "smallest diverged T",
                           float(diverged.min()), (float(diverged.min()),) * 2, claim,
                           "large T destabilises: training diverged"))
        return out
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(per_seed), (1000, len(per_seed)))
    gap = per_seed[:, big] - per_seed[:, one]
    out.append(_signed(f"digits, networks L = {L}, {_METRICS[metric]}",
                       f"loss(T = {T[big]:g}) − loss(T = 1)",
                       Optimum(float(gap.mean()), gap[idx].mean(1)), claim,
                       ("large T is worse than T = 1", "large T is better than T = 1",
                        "no difference resolved")))
    return out


def _best_T_finding(per_seed: np.ndarray, T: np.ndarray, one: int, L: int, metric: str,
                    claim: str) -> Finding:
    """The networks' lowest loss over the T grid (T points where a seed diverged
    skipped) minus their loss at T = 1, bootstrapped over seeds (≤ 0 by
    construction, biased low by the selection of the minimum: a gain is claimed
    only when the whole interval lies below 0)."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(per_seed), (1000, len(per_seed)))
    ok = ~np.isnan(per_seed).any(0)
    best = lambda v: v[:, ok].mean(0).min() - v[:, one].mean()  # noqa: E731
    t_best = T[ok][int(np.argmin(per_seed[:, ok].mean(0)))]
    gap = Optimum(float(best(per_seed)), np.array([best(per_seed[i]) for i in idx]))
    return _signed(f"digits, networks L = {L}, {_METRICS[metric]}",
                   f"lowest loss over T (at T = {t_best:g}) − loss at T = 1", gap, claim,
                   ("T = 1 is best", "moderate T helps: a T ≠ 1 trains to a lower loss",
                    "no gain from T ≠ 1 resolved"))


def _check_finding(ds: xr.Dataset) -> Finding:
    """The coupled limit's finite-P error: the train metric at P and 4P, against
    ±2 times the Monte Carlo bounds combined."""
    P = ds["particles"].values
    m, se = ds["check_train"].values, ds["check_train_se"].values
    diff, band = float(m[0] - m[1]), 2 * float(np.hypot(se[0], se[1]))
    verdict = ("within ±2 Monte Carlo s.e. bounds" if abs(diff) <= band
               else "exceeds the Monte Carlo bounds: a finite-P bias")
    return Finding(f"digits, coupled limit L = {ds.attrs['check_steps']}, η_c = "
                   f"{ds.attrs['check_eta']}, {_METRICS['train']}",
                   f"value at P = {P[0]} − at P = {P[1]}", diff, (diff - band, diff + band),
                   "finite-P error ≪ the differences measured", verdict)


def summarize_transfer(ds: xr.Dataset) -> list[Finding]:
    """Optimal η_c per depth (networks) beside the limits' optimum, drift with depth,
    approach to the limit, the two-layer rules, the horizon T and the finite-P check."""
    out = []
    widths = ds["width"].values.tolist()
    for dataset in ds["dataset"].values.tolist():
        for metric in _METRICS:
            if dataset != "digits" and metric == "probe":
                continue  # the teacher's probe curves are in the data file and figure
            lim_rows, lim = _limit_findings(ds, dataset, metric)
            out += lim_rows + _depth_findings(ds, dataset, metric, widths, lim)
    for metric in _METRICS:
        out += _two_layer_findings(ds, metric)
    out += _horizon_findings(ds, "train") + [_check_finding(ds)]
    return out


def conclude_transfer(ds: xr.Dataset) -> str:
    """The study's answer in numbers: η* at the shallowest and deepest depth of the
    widest networks beside the coupled limit's, on digits."""
    n = max(ds["width"].values.tolist())
    opts = net_optima(ds, "digits", "train", n)
    res = limit_inf(ds, "digits", "coupled", "train")
    if not opts or res is None:
        return "Not enough data for a conclusion."

    def fmt(o: Optimum) -> str:
        if not math.isfinite(o.estimate):
            return "not resolved (minimum at the grid's end)"
        lo, hi = (f"{math.exp(x):.3g}" if math.isfinite(x) else _OPEN for x in o.ci())
        return f"{math.exp(o.estimate):.3g} [{lo}, {hi}]"

    L0, L1 = min(opts), max(opts)
    return (f"On digits 3 vs 8 (running-mean train loss), the widest networks (n = {n}) "
            f"have η* = {fmt(opts[L0])} at L = {L0} and {fmt(opts[L1])} at L = {L1}; the "
            f"coupled limit extrapolated to L = ∞ predicts {fmt(res[0])} (95% intervals). "
            "The table gives every depth, width, metric, the verdicts, the two-layer "
            "rules and the horizon T.")
