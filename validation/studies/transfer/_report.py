"""Findings and conclusion of the transfer study: optimal η_c per depth against the limits'
optimum, its drift with depth, the two-layer-block rules (eq. 8), the horizon T, and
the optimal momentum and weight decay per depth against the coupled limit's.

Every verdict is computed from a 95% studentised bootstrap interval over seeds
(networks' seeds; the limits' own seeds, common to every grid point), whichever way
it comes out.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import xarray as xr

from scipy import stats

from ..._fit import bootstrap_replicates
from .._report import Finding
from ._fit import Optimum, compare_optima, drift, spread
from ._optima import (PARAMS, WD_REL, Param, T_lim_optimum, T_net_optimum, depth_drift,
                      edge_drift, limit_inf, net_optima, own_grid_optima, param_grid,
                      param_limit_inf, param_optima, param_thresholds, present, seed_matrix,
                      stability_edges, two_check_optimum, two_limit_inf, two_limit_optima,
                      two_optima)

__all__ = ["summarize_transfer", "conclude_transfer", "exp_finding", "signed_finding",
           "boot_min", "fmt_optimum", "own_grid_words", "own_grid_drift_rows",
           "own_grid_gain_rows",
           "own_grid_edge_rows"]

_METRICS = {"train": "running-mean train loss (last K/4 steps)",
            "probe": "probe loss after K steps"}
_TRANSFER = "one η* at every depth (depth-μP transfer; papers 000, 001)"
_OPEN = "open (grid end)"
_LIMIT_IV = ("interval: bootstrap over the limit's {S} seeds of the per-seed a + b/L "
             "intercepts (studentised)")
_PARAM_CLAIM = {"mom": "one β* at every depth (depth-μP; paper 000, Fig. 4a, limit App. K.5)",
                "wd": "one λ* at every depth (depth-μP; paper 000, Fig. B.8, limit App. L)"}


def _ends(ci: tuple[float, float]) -> tuple[str, str]:
    """Text for interval ends beyond the grid (infinite in log)."""
    return tuple(_OPEN if not math.isfinite(x) else "" for x in ci)


def exp_finding(observable: str, quantity: str, opt: Optimum, claim: str,
                 verdict: str, value=math.exp, sides: tuple[str, str] = ("low", "high"),
                 subject: str = "the minimum lies at") -> Finding:
    """A finding for exp(optimum) (an η_c, T or λ; ``value`` maps the log scale to
    the parameter otherwise, e.g. β = 1 − exp(x)), open interval ends named; an
    optimum beyond the grid is not resolved, and the verdict says on which side
    (``sides``: the names of the grid's ends at x = −inf and +inf; ``subject``: what
    lies there)."""
    lo, hi = opt.ci()
    resolved = math.isfinite(opt.estimate)
    if not resolved:
        verdict = _unresolved(opt, sides, subject)
    ci, ends = (value(lo), value(hi)), _ends((lo, hi))
    if ci[0] > ci[1]:  # a decreasing map (β = 1 − exp x) swaps the ends
        ci, ends = ci[::-1], ends[::-1]
    return Finding(observable, quantity, value(opt.estimate) if resolved else math.nan,
                   ci, claim, verdict, resolved=resolved, open_ends=ends)


def _unresolved(opt: Optimum, sides: tuple[str, str] = ("low", "high"),
                subject: str = "the minimum lies at") -> str:
    """Why an optimum beyond the grid is not resolved: its minimum lies at an end of
    the grid (``sides`` names the ends at x = −inf and +inf), or next to a diverged
    (or missing) point inside it."""
    if math.isnan(opt.estimate):
        return "not resolved: no finite loss"
    side = sides[0] if opt.estimate < 0 else sides[1]
    if opt.edge == "divergence":
        return f"not resolved: the minimum lies next to divergence (on its {side} side)"
    return f"not resolved: {subject} the {side} end of the grid"


def _overlap(a: Optimum, b: Optimum, name: str = "η*", flip: bool = False) -> str:
    """Whether the 95% intervals of two optima overlap, or which lies above (in the
    parameter ``name``; ``flip`` when it decreases along the log scale, β* = 1 − e^x)."""
    (alo, ahi), (blo, bhi) = a.ci(), b.ci()
    below, above = ("above", "below") if flip else ("below", "above")
    if not (math.isfinite(blo) or math.isfinite(bhi)):
        return "no comparison: the limit's interval is open on both sides"
    if ahi < blo:
        return f"{below} the limit's {name}: the intervals are disjoint"
    if alo > bhi:
        return f"{above} the limit's {name}: the intervals are disjoint"
    return f"consistent with the limit's {name} (the intervals overlap)"


def signed_finding(observable: str, quantity: str, opt: Optimum, claim: str,
            words: tuple[str, str, str], scale: float = 1.0) -> Finding:
    """A finding for a signed quantity: ``words`` = verdicts for an interval above
    0, below 0, and containing 0. An interval open at one end (optima beyond the
    grid's end) gives the sign when it excludes 0, and is not resolved when it holds
    0: it allows any value on its open side, so it cannot say the quantity is 0."""
    lo, hi = opt.ci()
    verdict = words[0] if lo > 0 else words[1] if hi < 0 else words[2]
    resolved = math.isfinite(opt.estimate) and (math.isfinite(lo) or math.isfinite(hi))
    if not resolved:
        verdict = "not resolved: optima beyond the grid's end (estimate or bootstrap)"
    elif lo <= 0 <= hi and not (math.isfinite(lo) and math.isfinite(hi)):
        resolved = False
        verdict = ("not resolved: the interval holds 0 and is open at one end (optima "
                   "beyond the grid's end)")
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
        out += _depth_rows(f"{dataset}, one-layer blocks, n = {n}, {_METRICS[metric]}",
                           "optimal η_c at L = {L}", "η*", opts, lim, _TRANSFER,
                           ("η* grows with depth", "η* falls with depth",
                            "consistent with 0: no drift of η* resolved"))
    if widest is not None and lim is not None:
        n, opts = widest
        first, last = min(opts), max(opts)
        near = [compare_optima(opts[L], lim) for L in (first, last)]
        with np.errstate(invalid="ignore"):  # both beyond the grid: NaN (unknown)
            delta = Optimum(abs(near[0].estimate) - abs(near[1].estimate),
                            np.abs(near[0].replicates) - np.abs(near[1].replicates),
                            min(near[0].dof, near[1].dof))
        out.append(signed_finding(
            f"{dataset}, one-layer blocks, n = {n}, {_METRICS[metric]}",
            f"distance d(L) = abs(log η*(L) − log η*∞): d({first}) − d({last})", delta,
            "η* approaches the limit's as L grows (paper 002, Theorem 1)",
            (f"approaches the limit's η* from L = {first} to {last}",
             f"moves away from the limit's η* from L = {first} to {last}",
             "no change in the distance to the limit's η* resolved")))
    return out


def _depth_rows(what: str, quantity: str, name: str, opts: dict[int, Optimum],
                lim: Optimum | None, claim: str, words: tuple[str, str, str] | None = None,
                flip: bool = False, log_of: str | None = None, **fmt) -> list[Finding]:
    """One row per depth (``quantity`` formatted with L; verdict: overlap with the
    limit's ``lim``, ``name`` the optimum's symbol) and the drift of log₂ of the
    optimum (of ``log_of`` when given, e.g. "(1 − β*)") per doubling of L.
    ``words`` are the drift's verdicts (above 0, below 0, holding 0); without them
    the verdict says "drifts by X [a, b] per doubling of L" or "transfers: no drift
    resolved". ``fmt``: how :func:`exp_finding` shows the parameter."""
    out = []
    for L, opt in opts.items():
        verdict = _overlap(opt, lim, name, flip) if lim is not None else "no limit run"
        out.append(exp_finding(what, quantity.format(L=L), opt, claim, verdict, **fmt))
    d = drift(np.log2(np.array(list(opts), float)), list(opts.values()))
    if words is None:
        lo, hi = d.ci()
        moved = f"drifts by {d.estimate:+.3g} [{lo:.3g}, {hi:.3g}] per doubling of L"
        words = (moved, moved, "transfers: no drift resolved (the interval holds 0)")
    out.append(signed_finding(what, f"drift: Δlog₂ {log_of or name} per doubling of L", d,
                       "0 (transfer)", words))
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
        out.append(exp_finding(
            f"{dataset}, limit backward={b!r}, {_METRICS[metric]}, a + b/L fit over L = {Ls}",
            "optimal η_c at L = ∞", opt, "the limit predicts the networks' η* (n, L → ∞)",
            _LIMIT_IV.format(S=opt.dof + 1)))
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
        out.append(signed_finding(what, "drift: Δlog₂ η* per doubling of L",
                           drift(np.log2(Ls[np.isin(Ls, list(opts))].astype(float)),
                                 list(opts.values())), claim,
                           ("η* grows with depth", "η* falls with depth",
                            "consistent with 0: no drift of η* resolved")))
    if len(spreads) == 2:
        out.append(_best_loss_finding(ds, metric, claim))
        diff = compare_optima(spreads["depth-mup"], spreads["depth-aware"])
        out.append(signed_finding(f"digits, two-layer blocks, {_METRICS[metric]}",
                           "log spread(depth-μP) − log spread(depth-aware)", diff, claim,
                           ("depth-aware η₁ transfers better (smaller spread)",
                            "depth-μP transfers better (smaller spread)",
                            "no difference in spread resolved")))
    return out


_TWO_CLAIM = {"depth-mup": "depth-μP (η₁ = η_c n): η* moves with depth (paper 002, Fig. 5)",
              "depth-aware": "η₁ = η_c n√L (eq. 8): one η* at every depth (paper 002, Fig. 5)"}
_TWO_WORDS = {"depth-mup": ("η* grows with depth: depth-μP does not transfer",
                            "η* falls with depth: depth-μP does not transfer",
                            "no drift resolved (the interval holds 0)"),
              "depth-aware": ("η* grows with depth: eq. 8 does not transfer",
                              "η* falls with depth: eq. 8 does not transfer",
                              "no drift resolved (the interval holds 0)")}


def _two_limit_drift(ds: xr.Dataset, rule: str, metric: str
                     ) -> tuple[dict[int, Optimum], Optimum | None]:
    """The two-layer blocks' coupled limit under ``rule``: {L: η*} and the drift of
    log₂ η* per doubling of L (None when not run)."""
    opts = two_limit_optima(ds, rule, metric)
    if not opts:
        return opts, None
    return opts, drift(np.log2(np.array(list(opts), float)), list(opts.values()))


def _two_limit_findings(ds: xr.Dataset, metric: str) -> list[Finding]:
    """The two-layer blocks' coupled limit under each first-layer rule: η* at each L
    (beside the networks' η* at that depth), its drift per doubling of L, which is
    the verdict on paper 002's eq. 8 claim without finite-width noise, the a + b/L
    extrapolation to L = ∞, and the difference of the two rules' drifts (paired:
    the same limit seeds and bootstrap draws)."""
    out, drifts = [], {}
    for rule in ds["first_layer_lr"].values.tolist():
        opts, drifts[rule] = _two_limit_drift(ds, rule, metric)
        if not opts:
            continue
        nets = two_optima(ds, rule, metric)
        what = (f"digits, two-layer blocks (eq. 6), coupled limit (P = "
                f"{ds.attrs['particles']}), η₁ {rule}, {_METRICS[metric]}")
        for L, opt in opts.items():
            verdict = (f"networks at L = {L}: " + _overlap(nets[L], opt) if L in nets
                       else "no networks at this depth")
            out.append(exp_finding(what, f"optimal η_c at L = {L}", opt, _TWO_CLAIM[rule],
                                    verdict))
        out.append(signed_finding(what, "drift: Δlog₂ η* per doubling of L", drifts[rule],
                           _TWO_CLAIM[rule], _TWO_WORDS[rule]))
        inf = two_limit_inf(ds, rule, metric)[0]
        Ls = ", ".join(str(v) for v in opts)
        out.append(exp_finding(
            f"{what}, a + b/L fit over L = {Ls}", "optimal η_c at L = ∞", inf,
            "the limit predicts the networks' η* (n, L → ∞)", _LIMIT_IV.format(
                S=inf.dof + 1) + "; it assumes the loss converges like a + b/L"))
    if all(d is not None for d in drifts.values()) and len(drifts) == 2:
        out.append(signed_finding(
            f"digits, two-layer blocks, coupled limit, {_METRICS[metric]}",
            "drift(depth-aware) − drift(depth-μP), Δlog₂ η* per doubling of L",
            compare_optima(drifts["depth-aware"], drifts["depth-mup"]),
            _TWO_CLAIM["depth-aware"],
            ("eq. 8's log₂ η* drifts up relative to depth-μP's",
             "eq. 8's log₂ η* drifts down relative to depth-μP's",
             "no difference in drift resolved")))
    return out


def _two_check_findings(ds: xr.Dataset, metric: str) -> list[Finding]:
    """The finite-P check of the two-layer limit's η* under each rule: at
    ``check_steps``, η* with ``particles`` over η* with ``check_particles`` (paired
    over the limit's seeds). P/(K·B) is only about 10 in the full study, and the
    coupled two-layer limit's finite-P bias is several times one-layer blocks'."""
    out = []
    L, P, P4 = (ds.attrs.get(k) for k in ("check_steps", "particles", "check_particles"))
    for rule in ds["first_layer_lr"].values.tolist():
        big = two_check_optimum(ds, rule, metric)
        small = two_limit_optima(ds, rule, metric).get(L)
        if big is None or small is None:
            continue
        ratio = compare_optima(small, big)
        lo, hi = ratio.ci()
        verdict = ("not resolved: the interval is open on both sides"
                   if math.isinf(lo) and math.isinf(hi) else
                   "consistent with no finite-P shift of η* (the interval holds 1)"
                   if lo <= 0 <= hi else "a finite-P shift of η* resolved (the interval "
                   "excludes 1)")
        out.append(exp_finding(
            f"digits, two-layer blocks (eq. 6), coupled limit, η₁ {rule}, {_METRICS[metric]}, "
            f"L = {L}, the same {small.dof + 1} seeds at each P",
            f"η*(P = {P}) / η*(P = {P4})", ratio,
            "finite-P error ≪ the drift of η* measured", verdict))
    return out


def boot_min(per_seed: np.ndarray, seed: int, n_boot: int = 1000):
    """min over the grid of the seed-mean curve of (seed, grid) values with its
    replicates over seeds resampled with the bootstrap seed ``seed`` (NaN grid
    points, i.e. diverged, skipped)."""
    lowest = lambda v: np.nanmin(v.mean(0))  # noqa: E731
    reps = bootstrap_replicates(per_seed, lowest, n_boot, axis=0, seed=seed)
    return Optimum(float(lowest(per_seed)), reps, per_seed.shape[0] - 1)


def _best_loss_finding(ds: xr.Dataset, metric: str, claim: str) -> Finding:
    """The lowest loss over η_c at the deepest depth, depth-aware minus depth-μP,
    with a bootstrap over seeds (each rule's seeds resampled on their own)."""
    L = int(ds["depth"].values.max())
    best = {rule: boot_min(seed_matrix(ds[f"two_{metric}"].sel(first_layer_lr=rule,
                                                                 depth=L)), seed)
            for seed, rule in enumerate(("depth-aware", "depth-mup"))}
    diff = compare_optima(best["depth-aware"], best["depth-mup"])
    return signed_finding(f"digits, two-layer blocks, L = {L}, {_METRICS[metric]}",
                   "lowest loss over η_c: depth-aware − depth-μP", diff,
                   "eq. 8 lowers the loss at depth (paper 002, Fig. 5, row 3)",
                   ("depth-aware is worse at its best η_c", "depth-aware reaches a lower loss",
                    "no difference in the lowest loss resolved"))


def _T_verdict(opt: Optimum) -> str:
    """Verdict on an optimal horizon (log T) from its interval: T* > 1, T* < 1, or
    consistent with T* = 1."""
    lo, hi = opt.ci()
    return ("moderate T helps: T* > 1" if lo > 0 else "T* < 1" if hi < 0
            else "consistent with T* = 1")


def _horizon_findings(ds: xr.Dataset, metric: str) -> list[Finding]:
    """Optimal T of the networks and of the coupled limit at the networks' depth
    and beyond; the lowest loss over T against T = 1 (networks and limit, paired
    over seeds); the loss at the largest T against T = 1."""
    L = int(ds.attrs["T_depth"])
    claim = "moderate T > 1 helps, large T destabilises (paper 002, Fig. 2)"
    net = T_net_optimum(ds, metric)
    out = [exp_finding(f"digits, networks L = {L}, n = {ds.attrs['T_width']}, η_c = "
                        f"{ds.attrs['T_eta']}, {_METRICS[metric]}", "optimal T", net, claim,
                        _T_verdict(net))]
    T = ds["T"].values
    big, one = int(np.argmax(T)), int(np.argmin(abs(T - 1.0)))
    for Ls in ds["T_steps"].values.tolist():
        opt = T_lim_optimum(ds, metric, Ls)
        what = f"digits, coupled limit L = {Ls}, η_c = {ds.attrs['T_eta']}, {_METRICS[metric]}"
        out.append(exp_finding(what, "optimal T", opt, claim, _T_verdict(opt)))
        lim = seed_matrix(ds[f"T_lim_{metric}"].sel(T_steps=Ls).transpose("lim_seed", "T"),
                          "lim_seed")
        out.append(_best_T_finding(lim, T, one, what, claim))
    per_seed = seed_matrix(ds[f"T_net_{metric}"].transpose("seed", "T"))
    out.append(_best_T_finding(per_seed, T, one, f"digits, networks L = {L}, "
                               f"{_METRICS[metric]}", claim))
    if np.isnan(per_seed[:, big]).any():
        diverged = T[np.isnan(per_seed).any(0)]
        out.append(Finding(f"digits, networks L = {L}", "smallest diverged T",
                           float(diverged.min()), (float(diverged.min()),) * 2, claim,
                           "large T destabilises: training diverged"))
        return out
    gap = per_seed[:, big] - per_seed[:, one]
    reps = bootstrap_replicates(gap, np.mean, 1000, axis=0)
    out.append(signed_finding(f"digits, networks L = {L}, {_METRICS[metric]}",
                       f"loss(T = {T[big]:g}) − loss(T = 1)",
                       Optimum(float(gap.mean()), reps, len(gap) - 1), claim,
                       ("large T is worse than T = 1", "large T is better than T = 1",
                        "no difference resolved")))
    return out


def _best_T_finding(per_seed: np.ndarray, T: np.ndarray, one: int, what: str,
                    claim: str) -> Finding:
    """The lowest seed-mean loss over the T grid (T points where a seed diverged
    skipped) minus the loss at T = 1, paired and bootstrapped over seeds. It is
    ≤ 0 by construction and biased low by the selection of the minimum, so a
    gain is claimed only when the whole interval lies below 0."""
    ok = ~np.isnan(per_seed).any(0)
    best = lambda v: v[:, ok].mean(0).min() - v[:, one].mean()  # noqa: E731
    t_best = T[ok][int(np.argmin(per_seed[:, ok].mean(0)))]
    gap = Optimum(float(best(per_seed)), bootstrap_replicates(per_seed, best, 1000, axis=0),
                  len(per_seed) - 1)
    lo, hi = gap.ci()
    verdict = (f"T = {t_best:g} trains to a lower loss than T = 1" if hi < 0
               else "no gain from T ≠ 1 resolved")
    return Finding(what, f"lowest loss over T (at T = {t_best:g}) − loss at T = 1",
                   gap.estimate, (lo, hi), claim, verdict)


def _check_finding(ds: xr.Dataset) -> Finding:
    """The coupled limit's finite-P error: the train metric at P minus at 4P (S
    seeds each), against its 95% t interval (Welch s.e., S − 1 degrees of
    freedom: conservative)."""
    P = ds["particles"].values
    v = ds["check_train"].transpose("particles", "lim_seed").values
    S = v.shape[1]
    diff = float(v[0].mean() - v[1].mean())
    se = float(np.sqrt(v[0].var(ddof=1) / S + v[1].var(ddof=1) / S))
    half = float(stats.t.ppf(0.975, S - 1)) * se
    verdict = ("consistent with no finite-P bias (the interval holds 0)"
               if abs(diff) <= half else "a finite-P bias resolved (the interval excludes 0)")
    return Finding(f"digits, coupled limit L = {ds.attrs['check_steps']}, η_c = "
                   f"{ds.attrs['check_eta']}, {_METRICS['train']}, {S} seeds at each P",
                   f"value at P = {P[0]} − at P = {P[1]}", diff, (diff - half, diff + half),
                   "finite-P error ≪ the differences measured", verdict)


def _param_format(ds: xr.Dataset, p: Param) -> dict:
    """How the rows of ``p`` show it: β = 1 − e^x (decreasing: overlaps flipped, drift
    of log₂(1 − β*)) or λ = e^x, the grid's ends named by their values."""
    x, _, off = param_grid(ds, p)
    sides = tuple(f"{p.symbol} = {p.value(v):.3g}" for v in (x[0], x[-1]))
    if off.size:  # the reference λ = 0 lies below the grid (see _optima._param_optimum)
        sides = (f"low ({p.symbol} = 0 … {p.value(x[0]):.3g})", sides[1])
    fmt = dict(value=p.value, sides=sides, name=f"{p.symbol}*")
    return dict(fmt, flip=True, log_of="(1 − β*)") if p.dim == "momentum" else fmt


def _no_interior(opts: dict[int, Optimum], lim: Optimum | None, fmt: dict) -> str | None:
    """The verdict when no depth has an interior optimum, all beyond the same end of
    the grid (None otherwise); says whether the limit's is beyond it too."""
    est = [o.estimate for o in opts.values()]
    if not est or not all(math.isinf(e) and e == est[0] for e in est):
        return None
    side = fmt["sides"][0] if est[0] < 0 else fmt["sides"][1]
    Ls = f"L = {min(opts)}…{max(opts)}" if len(opts) > 1 else f"L = {min(opts)}"
    limit = ""
    if lim is not None and lim.estimate == est[0]:
        limit = " and in the coupled limit"
    elif lim is not None:
        reach = math.isinf(lim.ci()[0 if est[0] < 0 else 1])
        limit = ("; the coupled limit's vertex is interior, its interval open at that end"
                 if reach else "; the coupled limit's optimum is interior")
    return (f"no interior optimum: the minimum lies at the {side} end of the grid at "
            f"every depth ({Ls}){limit}")


def _param_rows(what: str, lim_what: str, quantity: str, opts: dict[int, Optimum],
                lim: Optimum | None, claim: str, fmt: dict, subject: str) -> list[Finding]:
    """The limit's row, a row per depth and the drift for one parameter (optimum or
    threshold); the drift's verdict says so when no depth has an interior optimum."""
    shown = {k: fmt[k] for k in ("value", "sides")}
    out = []
    if lim is not None:
        out.append(exp_finding(lim_what, quantity.format(L="∞"), lim,
                                "the limit predicts the networks' value (n, L → ∞)",
                                _LIMIT_IV.format(S=lim.dof + 1), subject=subject, **shown))
    if not opts:
        return out
    rows = _depth_rows(what, quantity, fmt["name"], opts, lim, claim, flip=fmt.get("flip", False),
                       log_of=fmt.get("log_of"), subject=subject, **shown)
    none = _no_interior(opts, lim, fmt) if subject == "the minimum lies at" else None
    if none is not None:
        rows[-1] = replace(rows[-1], verdict=none)
    return out + rows


def _effective_rate(ds: xr.Dataset, lim: Optimum, metric: str, what: str) -> Finding | None:
    """The coupled limit's optimal effective rate η_c/(1 − β*) at L = ∞ over its
    plain-SGD η* (β = 0; the same limit seeds, so paired)."""
    plain = limit_inf(ds, "digits", "coupled", metric) if f"lim_{metric}" in ds else None
    if plain is None or not (math.isfinite(lim.estimate) and math.isfinite(plain[0].estimate)):
        return None
    log_eta = math.log(ds.attrs["mom_eta"])
    eff = Optimum(log_eta - lim.estimate, log_eta - lim.replicates, lim.dof)
    ratio = compare_optima(eff, plain[0])
    lo, hi = ratio.ci()
    verdict = ("consistent with 1: momentum's optimum sits at the plain optimal rate"
               if lo <= 0 <= hi else "above 1: the intervals exclude it" if lo > 0
               else "below 1: the intervals exclude it")
    return exp_finding(what, "effective rate η_c/(1 − β*) ÷ plain η* (β = 0), L = ∞",
                        ratio, "heavy-ball momentum acts as the rate η_c/(1 − β)", verdict)


def _param_findings(ds: xr.Dataset, p: Param, metric: str) -> list[Finding]:
    """Optimal ``p`` per depth of the networks at ``optim_width`` beside the coupled
    limit's at L = ∞ and its drift per doubling of L; for momentum the limit's
    optimal effective rate against its plain η*; for weight decay also the
    threshold λ₁₀ where the loss first exceeds plain SGD's (λ = 0) by 10%."""
    opts, lim = param_optima(ds, p, metric), param_limit_inf(ds, p, metric)
    if not opts and lim is None:
        return []
    eta, fmt = ds.attrs[f"{p.prefix}_eta"], _param_format(ds, p)
    Ls = ", ".join(str(v) for v in ds["steps"].values.tolist())
    what = (f"digits, {p.name}, one-layer blocks, n = {ds.attrs['optim_width']}, "
            f"η_c = {eta}, {_METRICS[metric]}")
    lim_what = (f"digits, {p.name}, coupled limit, η_c = {eta}, {_METRICS[metric]}, "
                f"a + b/L fit over L = {Ls}")
    out = _param_rows(what, lim_what, f"optimal {p.name} {p.symbol} at L = {{L}}", opts,
                      lim, _PARAM_CLAIM[p.prefix], fmt, "the minimum lies at")
    if p.prefix == "mom" and lim is not None:
        eff = _effective_rate(ds, lim, metric, lim_what)
        out += [] if eff is None else [eff]
    if p.prefix == "wd":
        nets, lim_t = param_thresholds(ds, p, metric)
        out += _param_rows(
            what, lim_what, f"λ₁₀ (loss {WD_REL:.0%} above λ = 0's) at L = {{L}}", nets,
            lim_t, "weight decay's effect transfers across depth (paper 000, Fig. B.8)",
            dict(fmt, name="λ₁₀"), "the crossing lies beyond")
    return out


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
        out += (_two_layer_findings(ds, metric) + _two_limit_findings(ds, metric)
                + _two_check_findings(ds, metric))
    out += _horizon_findings(ds, "train") + [_check_finding(ds)]
    for p in PARAMS.values():
        for metric in _METRICS:
            out += _param_findings(ds, p, metric)
    return out


def conclude_transfer(ds: xr.Dataset) -> str:
    """The study's answer in numbers: η* at the shallowest and deepest depth of the
    widest networks beside the coupled limit's, on digits."""
    n = max(ds["width"].values.tolist())
    opts = net_optima(ds, "digits", "train", n)
    res = limit_inf(ds, "digits", "coupled", "train")
    if not opts or res is None:
        return "Not enough data for a conclusion."

    fmt = fmt_optimum
    L0, L1 = min(opts), max(opts)
    return (f"On digits 3 vs 8 (running-mean train loss), the widest networks (n = {n}) "
            f"have η* = {fmt(opts[L0])} at L = {L0} and {fmt(opts[L1])} at L = {L1}; the "
            f"coupled limit extrapolated to L = ∞ predicts {fmt(res[0])} (95% intervals). "
            + _conclude_two(ds)
            + "".join(_conclude_param(ds, p) for p in PARAMS.values())
            + "The table gives every depth, width, metric, the verdicts, the two-layer "
            "rules, the horizon T, momentum and weight decay.")


def fmt_optimum(o: Optimum, value=math.exp, beyond: str = "minimum at the grid's end"
                 ) -> str:
    """'estimate [lo, hi]' of an optimum on its log scale shown through ``value``."""
    if not math.isfinite(o.estimate):
        return f"not resolved ({beyond})"
    ends = sorted(((value(x), f"{value(x):.3g}") if math.isfinite(x) else
                   (value(x), _OPEN) for x in o.ci()), key=lambda t: t[0])
    return f"{value(o.estimate):.3g} [{ends[0][1]}, {ends[1][1]}]"


def own_grid_words(ds: xr.Dataset, prefix: str, metric: str = "train") -> str:
    """The drift of log₂ η* of :func:`._optima.own_grid_optima` in words, with the
    depths where the optimum left the grid and those where every run diverged (the
    controls of studies 11 and 12)."""
    opts = own_grid_optima(ds, prefix, metric)
    out = (f"{fmt_optimum(depth_drift(opts), value=float)} over L = "
           f"{', '.join(map(str, sorted(opts)))}" if len(opts) > 1 else "no drift measurable")
    Ls = ds["depth"].values.tolist()
    lost = [L for L in Ls if not present(ds[f"{prefix}_{metric}"].sel(depth=L))]
    pinned = [L for L in Ls if L not in opts and L not in lost]
    if pinned:
        out += (f"; at L = {', '.join(map(str, pinned))} its lowest loss sat beside a "
                "diverged η or at the grid's end (no interior optimum: the drift leaves "
                "out these depths, where the optimum moved furthest)")
    if lost:
        out += f"; at L = {', '.join(map(str, lost))} it diverged at every η of its grid"
    return out


def own_grid_drift_rows(ds: xr.Dataset, prefix: str, metric: str, observable: str,
                        claim: str, words: tuple[str, str, str],
                        rate: str = "") -> list[Finding]:
    """The drift of log₂ η* per doubling of L of networks on a grid of their own over
    the depths with an interior optimum (:func:`._optima.own_grid_optima`); ``rate``
    names that grid's rate in the quantity. No row with fewer than two such depths."""
    opts = own_grid_optima(ds, prefix, metric)
    if len(opts) < 2:
        return []
    Ls = ", ".join(map(str, sorted(opts)))
    return [signed_finding(
        observable, f"drift of log₂ η* per doubling of L (L = {Ls}, the depths with an "
        f"interior optimum{'; η: ' + rate if rate else ''})", depth_drift(opts), claim,
        words)]


def own_grid_gain_rows(ds: xr.Dataset, prefix: str, metric: str, observable: str,
                       claim: str) -> list[Finding]:
    """The lowest loss of networks on a grid of their own
    (:func:`._optima.own_grid_optima`) at the deepest depth where some run trained,
    minus at the shallowest: each lowest seed-mean loss over the grid bootstrapped
    over seeds with the same draws (paired); no row with fewer than two such depths."""
    cells = {L: ds[f"{prefix}_{metric}"].sel(depth=L) for L in ds["depth"].values.tolist()}
    ran = [L for L, cell in cells.items() if present(cell)]
    if len(ran) < 2:
        return []
    low, high = (boot_min(seed_matrix(cells[L]), 0) for L in (ran[0], ran[-1]))
    return [signed_finding(
        observable, f"lowest loss over its grid: L = {ran[-1]} − L = {ran[0]}",
        compare_optima(high, low), claim,
        ("deeper is worse at its best η", "deeper is better at its best η",
         "no change with depth resolved"))]


def own_grid_edge_rows(ds: xr.Dataset, prefix: str, observable: str,
                       claim: str) -> list[Finding]:
    """The drift of the edge of stability of networks on a grid of their own
    (:func:`._optima.stability_edges`, :func:`._optima.edge_drift`), its interval
    the bound from the grid's step; no row with fewer than two edges inside the
    grid."""
    edges = stability_edges(ds, prefix)
    d = edge_drift(edges)
    if d is None:
        return []
    Ls = [L for L, (s, u) in edges.items() if np.isfinite(s) and np.isfinite(u)]
    est, lo, hi = d
    verdict = ("the edge rises with depth" if lo > 0 else "the edge falls with depth"
               if hi < 0 else "no drift of the edge resolved at the grid's resolution")
    return [Finding(
        observable, f"drift of log₂ of the largest rate at which no seed diverged, per "
        f"doubling of L (L = {', '.join(map(str, Ls))}; interval: the bound from the "
        "grid's step, not statistical)", est, (lo, hi), claim, verdict)]


def _conclude_two(ds: xr.Dataset) -> str:
    """A sentence on the two-layer blocks' coupled limit: the drift of its η* per
    doubling of L under each first-layer rule, train and probe loss, with intervals."""
    if "first_layer_lr" not in ds.dims:
        return ""
    parts = []
    for metric in ("train", "probe"):
        for rule, rname in (("depth-mup", "depth-μP"), ("depth-aware", "eq. 8")):
            d = _two_limit_drift(ds, rule, metric)[1] if f"two_lim_{metric}" in ds else None
            if d is None:
                continue
            row = signed_finding("", "", d, "", _TWO_WORDS[rule])
            shown = (f"{row.estimate:+.2f} [{row.ci[0]:.2f}, {row.ci[1]:.2f}]" if row.resolved
                     else "an unresolved amount")
            parts.append(f"{shown} under {rname} ({metric} loss: {row.verdict})")
    if not parts:
        return ""
    Ls = ds["two_steps"].values.tolist()
    return (f"Two-layer blocks (eq. 6), their coupled limit at L = {min(Ls)}…{max(Ls)}: "
            f"log₂ η* drifts per doubling of L by {'; '.join(parts)}. ")


def _conclude_param(ds: xr.Dataset, p: Param) -> str:
    """A sentence on ``p`` (train loss): the networks' optimum at the shallowest and
    deepest depth and its drift, the coupled limit's, or that there is no interior
    optimum; for weight decay the threshold λ₁₀ as well."""
    opts, lim = param_optima(ds, p, "train"), param_limit_inf(ds, p, "train")
    if not opts:
        return ""
    fmt, L0, L1 = _param_format(ds, p), min(opts), max(opts)
    rows = _param_rows("", "", "", opts, lim, "", fmt, "the minimum lies at")
    head = (f"{p.name.capitalize()} (η_c = {ds.attrs[f'{p.prefix}_eta']}, "
            f"n = {ds.attrs['optim_width']}): ")
    show = lambda o: fmt_optimum(o, p.value)  # noqa: E731
    none = _no_interior(opts, lim, fmt)
    if none is not None:
        text = head + none + ". "
    else:
        text = (head + f"{p.symbol}* = {show(opts[L0])} at L = {L0} and {show(opts[L1])} "
                f"at L = {L1} ({rows[-1].verdict}); the coupled limit predicts "
                f"{show(lim) if lim is not None else 'nothing (not run)'}. ")
    if p.prefix == "wd":
        nets, lim_t = param_thresholds(ds, p, "train")
        drift_t = _param_rows("", "", "", nets, lim_t, "", dict(fmt, name="λ₁₀"),
                              "the crossing lies beyond")[-1]
        cross = lambda o: fmt_optimum(o, p.value, "beyond the grid")  # noqa: E731
        text += (f"The loss first exceeds plain SGD's (λ = 0) by {WD_REL:.0%} at λ₁₀ = "
                 f"{cross(nets[L0])} at L = {L0} and {cross(nets[L1])} at L = {L1} "
                 f"({drift_t.verdict}); the coupled limit: "
                 f"{cross(lim_t) if lim_t is not None else 'not run'}. ")
    return text
