"""Findings and conclusion of study 13 (:mod:`._tp6_run`): on Tensor Programs VI's own
block, the optimal hidden rate η_c per depth under depth-μP, the block multiplier
only, the ODE limit (1, 0) and SP, its drift per doubling of L (Figs. 10, 11), the
optimal block multiplier a per depth and its drift (Fig. 13), and the lowest loss
against depth.

Optima and drifts are read as in studies 10 and 11 (:func:`._optima.rule_optima`,
:func:`._optima.depth_drift`): the vertex of the local parabola in log η_c (or
log a), with 95% studentised bootstrap intervals over seeds (the limit's own seeds,
the same at every grid point, rule and depth, so that differences are paired; or the
networks' seeds). A point outside a rule's window is missing, so a minimum at a
window's end is "not resolved". Every verdict is computed from the interval.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from .._report import Finding
from ._adam_report import CONTROL_DRIFT_WORDS, lowest_difference, rule_drift_rows
from ._branch_report import kappa
from ._fit import compare_optima
from ._optima import depth_drift, present, rule_optima, seed_matrix
from ._report import boot_min, fmt_optimum, signed_finding
from ._tp6_verdicts import with_agreement

__all__ = ["summarize_tp6", "conclude_tp6", "a_view", "variant_view", "sp_trained",
           "RULE_NAMES", "VARIANT_NAMES", "CHANCE"]

#: How the report names each rule of :data:`._tp6_run.TP6_RULES`.
RULE_NAMES = {"depth-mup": "depth-μP (α, γ) = (½, ½)",
              "block-only": "block multiplier only (α, γ) = (½, 0)",
              "ode": "ODE limit (α, γ) = (1, 0)",
              "sp": "SP (α, γ) = (0, 1)"}
_METRICS = {"train": "running-mean train loss (last K/4 steps)",
            "probe": "test loss after K steps"}
#: TP VI's claim on the drift of each rule's η* (its figure and panel).
_CLAIM = {"depth-mup": "η* transfers: drift 0 (TP VI Fig. 10 top)",
          "block-only": "η* shifts with depth (TP VI Fig. 10 middle; theory: −½)",
          "ode": "η* shifts with depth, upwards (TP VI Fig. 11, §10.2)",
          "sp": "η* shifts with depth (TP VI Fig. 10 bottom)"}
_BLOCK = "TP VI block (post-nonlin, MS), U and V frozen, Adam"
#: How the report names each variant of :data:`._tp6_run.TP6_VARIANTS` (depth-μP).
VARIANT_NAMES = {"abs": "depth-μP, |x| for relu",
                 "abs-ln": "depth-μP, |x| and pre-LayerNorm"}
#: TP VI's claim on each variant's η* and on its lowest loss against depth.
_VARIANT_CLAIM = {
    "abs": ("no explicit claim (Fig. 3 is Fig. 10's setup with |x|; depth-μP's theory "
            "predicts transfer)", "|x| improves the loss at depth (TP VI Fig. 3)"),
    "abs-ln": ("η* transfers with preLN under depth-μP (TP VI Fig. 12 left)",
               "the training loss improves consistently with depth (TP VI Fig. 12)")}
_DEPTH_WORDS = ("deeper is worse at its best η_c", "deeper is better at its best η_c",
                "no change with depth resolved")


def _prefixed_view(ds: xr.Dataset, prefix: str, drop: list[str], dim: str,
                   as_dim: str) -> xr.Dataset:
    """The variables ``<prefix>net_*``/``<prefix>lim_*`` of ``ds`` as ``net_*``/``lim_*``,
    without the coordinates ``drop``, with ``dim`` renamed ``as_dim``: a sweep the η_c
    helpers read."""
    names = [k for k in ds.data_vars if k.startswith(prefix)]
    view = ds[names].rename({k: k.removeprefix(prefix) for k in names})
    view = view.drop_vars(drop, errors="ignore").rename({dim: as_dim})
    view.attrs = dict(ds.attrs)
    return view


def a_view(ds: xr.Dataset) -> xr.Dataset:
    """Fig. 13's sweep of the block multiplier as a Dataset the η_c helpers read:
    ``a_net_*``/``a_lim_*`` as ``net_*``/``lim_*`` over ``eta_c`` = a."""
    return _prefixed_view(ds, "a_", ["eta_c", "rule", "alpha", "gamma"],
                          "block_multiplier", "eta_c")


def variant_view(ds: xr.Dataset) -> xr.Dataset:
    """The variants' sweeps as a Dataset the η_c helpers read: ``v_net_*``/``v_lim_*``
    as ``net_*``/``lim_*`` with ``variant`` as ``rule``."""
    return _prefixed_view(ds, "v_", ["rule", "alpha", "gamma", "block_multiplier"],
                          "variant", "rule")


def _vwhere(variant: str, metric: str, width: int | None, L: int | None = None) -> str:
    who = "limit (n = ∞ at each L)" if width is None else f"networks, n = {width}"
    at = "" if L is None else f", L = {L}"
    return (f"ten-class digits, {_BLOCK}, {VARIANT_NAMES[variant]}, {who}{at}, "
            f"{_METRICS[metric]}")


def _lowest_pair(cells: list, width: int | None, observable: str, quantity: str,
                 claim: str, words: tuple[str, str, str]) -> list[Finding]:
    """The lowest loss over η_c of ``cells[1]`` minus ``cells[0]``: the limit's
    (``width`` None, its seeds), or the networks' (their seeds), paired (the same
    seeds and bootstrap draws in both)."""
    if width is None:
        row = lowest_difference(cells, observable, quantity, claim, words)
        return [] if row is None else [row]
    if not all(present(c) for c in cells):
        return []
    best = [boot_min(seed_matrix(c, "seed"), 0) for c in cells]
    return [signed_finding(observable, quantity, compare_optima(best[1], best[0]), claim,
                           words)]


def _variant_rows(ds: xr.Dataset) -> list[Finding]:
    """Figs. 3 and 12: each variant's drift of η* and its lowest loss at the deepest
    depth minus the shallowest, limit and networks; |x| − relu at the shallowest and
    the deepest depth."""
    view = variant_view(ds)
    Ls = ds["depth"].values.tolist()
    L0, L1 = min(Ls), max(Ls)
    out = []
    for metric in _METRICS:
        for v in VARIANT_NAMES:
            out += rule_drift_rows(view, metric, lambda w, v=v, m=metric: _vwhere(v, m, w),
                                   _VARIANT_CLAIM[v][0], rule=v)
        for v in VARIANT_NAMES:
            for width in [None] + ds["width"].values.tolist():
                pre = "lim" if width is None else "net"
                da = view[f"{pre}_{metric}"].sel(rule=v)
                da = da if width is None else da.sel(width=width)
                out += _lowest_pair([da.sel(depth=L0), da.sel(depth=L1)], width,
                                    _vwhere(v, metric, width),
                                    f"lowest loss over η_c: L = {L1} − L = {L0}",
                                    _VARIANT_CLAIM[v][1], _DEPTH_WORDS)
        out += _abs_relu_rows(ds, view, metric, (L0, L1))
    return out


def _abs_relu_rows(ds: xr.Dataset, view: xr.Dataset, metric: str, depths) -> list[Finding]:
    """Fig. 3: the lowest loss over η_c under depth-μP, |x| minus relu (study 13's
    depth-μP rows), per depth of ``depths``, limit and networks."""
    out = []
    for L in depths:
        for width in [None] + ds["width"].values.tolist():
            pre = "lim" if width is None else "net"
            sel = {"depth": L} | ({} if width is None else {"width": width})
            cells = [ds[f"{pre}_{metric}"].sel(rule="depth-mup", **sel),
                     view[f"{pre}_{metric}"].sel(rule="abs", **sel)]
            who = "limit (n = ∞)" if width is None else f"networks, n = {width}"
            out += _lowest_pair(
                cells, width, f"ten-class digits, {_BLOCK}, depth-μP, {who}, L = {L}, "
                f"{_METRICS[metric]}", "lowest loss over η_c: |x| − relu",
                "|x| trains better than relu at depth (TP VI Fig. 3, §8.3)",
                ("|x| is worse at its best η_c", "|x| reaches a lower loss",
                 "no difference resolved"))
    return out


def _kappa_rows(ds: xr.Dataset) -> list[Finding]:
    """Fig. 19: κ of relu and |x| in the limit per depth and phase, and κ(|x|) −
    κ(relu) (paired over the limit's seeds)."""
    out = []
    eta = ds.attrs["kappa_eta"]
    quantity = ("feature diversity exponent κ (slope of log E|x_{t+ε} − x_t|², "
                "ε = 1/16…1/2)")
    for L in ds["kappa_depth"].values.tolist():
        for phase in ("init", "trained"):
            when = "at initialization" if phase == "init" else "after K − 1 steps"
            where = (f"ten-class digits, {_BLOCK}, depth-μP, limit (n = ∞), L = {L}, "
                     f"η_c = {eta:.3g}, {when}")
            ks = {act: kappa(ds, act, L, phase, dim="activation") for act in ("relu", "abs")}
            for act, k in ks.items():
                lo, hi = k.ci()
                out.append(Finding(
                    f"{where}, {'|x|' if act == 'abs' else 'relu'}", quantity, k.estimate,
                    (lo, hi), "κ = ½ under depth-μP (TP VI Claim 7.5)",
                    "consistent with ½" if lo <= 0.5 <= hi else
                    "below ½" if hi < 0.5 else "above ½"))
            out.append(signed_finding(
                where, "κ(|x|) − κ(relu)", compare_optima(ks["abs"], ks["relu"]),
                "|x| has more feature diversity than relu: κ(|x|) > κ(relu) (TP VI §8.3, "
                "Fig. 19)", ("|x| has the larger κ", "relu has the larger κ",
                             "no difference resolved")))
    return out


def _where(rule: str | None, metric: str, width: int | None) -> str:
    who = "limit (n = ∞ at each L)" if width is None else f"networks, n = {width}"
    what = (RULE_NAMES[rule] if rule is not None
            else "depth-μP, block multiplier a swept at one η_c")
    return f"ten-class digits, {_BLOCK}, {what}, {who}, {_METRICS[metric]}"


def _contrast(ds: xr.Dataset, metric: str, rule: str) -> list[Finding]:
    """The limit's drift under ``rule`` minus under depth-μP (the same seeds)."""
    drifts = {r: rule_optima(ds, metric, None, rule=r) for r in (rule, "depth-mup")}
    if any(len(o) < 2 for o in drifts.values()):
        return []
    diff = compare_optima(depth_drift(drifts[rule]), depth_drift(drifts["depth-mup"]))
    return [signed_finding(
        f"ten-class digits, {_BLOCK}, limit (n = ∞ at each L), {_METRICS[metric]}",
        f"drift, {RULE_NAMES[rule]} − depth-μP", diff,
        "only depth-μP transfers η* (TP VI Figs. 10, 11)",
        ("its η* rises faster with depth than depth-μP's",
         "its η* falls faster with depth than depth-μP's",
         "no difference from depth-μP resolved"))]


def _lowest_rows(ds: xr.Dataset, metric: str, rule: str) -> list[Finding]:
    """The lowest loss over η_c at the deepest depth minus at the shallowest: the
    limit's (paired over its seeds), or for SP the widest networks'."""
    Ls = ds["depth"].values.tolist()
    L0, L1 = min(Ls), max(Ls)
    words = ("deeper is worse at its best η_c", "deeper is better at its best η_c",
             "no change with depth resolved")
    claim = ("the loss falls with depth (TP VI Fig. 10 top)" if rule == "depth-mup" else
             "the loss degrades at large depth (TP VI Fig. 10 bottom)" if rule == "sp" else
             "no claim")
    quantity = f"lowest loss over η_c: L = {L1} − L = {L0}"
    if rule != "sp":
        da = ds[f"lim_{metric}"].sel(rule=rule)
        row = lowest_difference([da.sel(depth=L0), da.sel(depth=L1)],
                                _where(rule, metric, None), quantity, claim, words)
        return [] if row is None else [row]
    n = max(ds["width"].values.tolist())
    cells = [ds[f"net_{metric}"].sel(rule=rule, width=n, depth=L) for L in (L0, L1)]
    if not all(present(c) for c in cells):
        return []
    best = [boot_min(seed_matrix(c, "seed"), 0) for c in cells]
    return [signed_finding(_where(rule, metric, n), quantity,
                           compare_optima(best[1], best[0]), claim, words)]


def _a_rows(ds: xr.Dataset) -> list[Finding]:
    """Fig. 13: the drift of log₂ a* per doubling of L, limit and networks, per
    metric."""
    view = a_view(ds)
    eta = ds.attrs.get("a_eta", float("nan"))
    out = []
    for metric in _METRICS:
        rows = rule_drift_rows(view, metric, lambda w, m=metric: _where(None, m, w),
                               f"a* transfers: it converges with depth (TP VI Fig. 13, "
                               f"here η_c = {eta:.3g})")
        out += [Finding(r.observable, r.quantity.replace("η*", "a*"), r.estimate, r.ci,
                        r.claim, r.verdict.replace("η*", "a*"), r.resolved, r.open_ends)
                for r in rows]
    return out


def summarize_tp6(ds: xr.Dataset) -> list[Finding]:
    """Study 13's findings: the drift of η* per rule (limit and networks, train and
    test loss), each rule's drift against depth-μP's (limit), the lowest loss
    against depth, and the drift of the optimal block multiplier a; each verdict
    followed by whether it agrees with TP VI (:func:`._tp6_verdicts.agreement`)."""
    out = []
    for metric in _METRICS:
        for rule in ("depth-mup", "block-only", "ode"):
            out += rule_drift_rows(ds, metric, lambda w, r=rule, m=metric: _where(r, m, w),
                                   _CLAIM[rule], rule=rule)
        out += _sp_rows(ds, metric)
        for rule in ("block-only", "ode"):
            out += _contrast(ds, metric, rule)
    out += _a_rows(ds)
    for metric in _METRICS:  # block-only's lowest loss is depth-μP's (rescaled rate)
        for rule in ("depth-mup", "ode", "sp"):
            out += _lowest_rows(ds, metric, rule)
    if "v_net_train" in ds:  # version 2: Figs. 3, 12 and 19
        out += _variant_rows(ds) + _kappa_rows(ds)
    return with_agreement(out)


#: The loss of a uniform guess over the ten classes: a depth where no η_c trains below
#: it has no optimum to speak of (SP at L = 64, whose logits start near 10³).
CHANCE = math.log(10)


def sp_trained(ds: xr.Dataset, metric: str, width: int) -> list[int]:
    """The depths where SP's networks at ``width`` reach a seed-mean loss below
    :data:`CHANCE` at some η_c."""
    da = ds[f"net_{metric}"].sel(rule="sp", width=width)
    return [L for L in ds["depth"].values.tolist()
            if present(da.sel(depth=L)) and np.nanmin(da.sel(depth=L).mean("seed")) < CHANCE]


def _sp_rows(ds: xr.Dataset, metric: str) -> list[Finding]:
    """SP's drift of η* (networks only: the limit takes α ≥ ½), over the depths
    where it trains (:func:`sp_trained`; an interval holding 0 says no drift was
    resolved, not that SP transfers)."""
    rows = []
    for n in ds["width"].values.tolist():
        Ls = sp_trained(ds, metric, n)
        opts = {L: o for L, o in rule_optima(ds, metric, n, rule="sp").items() if L in Ls}
        if len(opts) < 2:
            continue
        rows.append(signed_finding(
            _where("sp", metric, n),
            f"drift of log₂ η* per doubling of L (L = {', '.join(map(str, Ls))}: the "
            "depths where some η_c trains below ln 10)", depth_drift(opts), _CLAIM["sp"],
            CONTROL_DRIFT_WORDS))
    return rows


def _drift_words(ds: xr.Dataset, rule: str, width: int | None, metric: str = "train") -> str:
    """'d [lo, hi]' of a rule's drift of log₂ η* (SP: over the depths it trains at)."""
    opts = rule_optima(ds, metric, width, rule=rule)
    if rule == "sp":
        opts = {L: o for L, o in opts.items() if L in sp_trained(ds, metric, width)}
    return fmt_optimum(depth_drift(opts), value=float) if len(opts) > 1 else "—"


def conclude_tp6(ds: xr.Dataset) -> str:
    """The answer in numbers: each rule's drift of η* per doubling of L, limit and
    the widest networks, SP's over the depths it trains at, and the drift of a*."""
    n = max(ds["width"].values.tolist())
    parts = [f"{RULE_NAMES[r]}: limit {_drift_words(ds, r, None)}, networks "
             f"{_drift_words(ds, r, n)}" for r in ("depth-mup", "block-only", "ode")]
    view = a_view(ds)
    a_lim, a_net = (rule_optima(view, "train", w) for w in (None, n))
    a_words = (f"limit {fmt_optimum(depth_drift(a_lim), value=float)}, networks "
               f"{fmt_optimum(depth_drift(a_net), value=float)}"
               if len(a_lim) > 1 and len(a_net) > 1 else "—")
    Ls = ds["depth"].values.tolist()
    trained = sp_trained(ds, "train", n)
    untrained = [L for L in Ls if L not in trained]
    sp = (f"SP (networks only: the limit takes α ≥ ½) trains below ln 10 at L = "
          f"{', '.join(map(str, trained))}, with a drift of {_drift_words(ds, 'sp', n)} "
          "there" + (f"; at L = {', '.join(map(str, untrained))} its lowest loss is "
                     f"{float(ds['net_train'].sel(rule='sp', width=n, depth=untrained[-1]).mean('seed').min()):.3g}"
                     " (its unscaled relu branches grow the features geometrically with "
                     "depth)" if untrained else ""))
    return ("On TP VI's block (post-nonlinearity relu with mean subtraction, T = 1, "
            "U and V frozen, only W trained by Adam at lr η_c·(T/L)^γ/√n), ten-class "
            f"digits, running-mean train loss, L = {min(Ls)}…{max(Ls)}: the drift of "
            "log₂ η* per doubling of L is " + "; ".join(parts) + f" (networks at n = {n}; "
            "95% intervals). The block multiplier only at η_c is the same network as "
            "depth-μP at η_c·√(L/T), seed for seed, so its drift is depth-μP's minus ½ "
            "exactly: it measures nothing depth-μP's rows do not. " + sp + ". The "
            f"optimal block multiplier a (depth-μP, η_c = {ds.attrs['a_eta']:.3g}) drifts "
            f"by {a_words} in log₂ a* per doubling. The table gives the test loss, both "
            "widths, each rule against depth-μP and the lowest loss against depth. "
            "Studies 10 and 11 measured depth-μP, the block multiplier only and α = 1 "
            "under Adam on paper 002's pre-nonlinearity block (eq. 1), with U and V "
            "trained at the swept rate; README's Adam and branch-exponent bullets put "
            "those drifts beside these." + (_variant_words(ds) if "v_net_train" in ds
                                            else ""))


def _words(f: Finding | None) -> str:
    """'estimate [lo, hi]' of a finding."""
    if f is None or not f.resolved:
        return "not resolved"
    return f"{f.estimate:.3g} [{f.ci[0]:.3g}, {f.ci[1]:.3g}]"


def _variant_words(ds: xr.Dataset) -> str:
    """Figs. 3, 12 and 19 in numbers: |x| − relu and L = 64 − L = 4 of the lowest
    train loss (limit; widest networks), the variants' drifts, and κ after training
    at the deepest κ depth."""
    n = max(ds["width"].values.tolist())
    rows = [f for f in _variant_rows(ds) if f.observable.endswith(_METRICS["train"])]
    Ls = ds["depth"].values.tolist()

    def pick(quantity: str, *keys: str) -> Finding | None:
        hits = [f for f in rows if f.quantity.startswith(quantity)
                and all(k in f.observable for k in keys)]
        return hits[0] if hits else None

    lim, net = "limit (n = ∞", f"networks, n = {n},"
    diff = "lowest loss over η_c: |x| − relu"
    gain = f"lowest loss over η_c: L = {max(Ls)} − L = {min(Ls)}"
    L = max(ds["kappa_depth"].values.tolist())
    ks = {a: kappa(ds, a, L, "trained", dim="activation") for a in ("relu", "abs")}
    k_rows = [f for f in _kappa_rows(ds) if f.quantity == "κ(|x|) − κ(relu)"
              and f"L = {L}," in f.observable and "after" in f.observable]
    parts = [
        f" |x| for relu under depth-μP (Fig. 3): its lowest train loss minus relu's at "
        f"L = {max(Ls)} is {_words(pick(diff, lim, f'L = {max(Ls)},'))} (limit) and "
        f"{_words(pick(diff, net, f'L = {max(Ls)},'))} (networks, n = {n}); at L = "
        f"{min(Ls)} {_words(pick(diff, lim, f'L = {min(Ls)},'))} (limit). Its own "
        f"lowest loss changes from L = {min(Ls)} to {max(Ls)} by "
        f"{_words(pick(gain, VARIANT_NAMES['abs'], lim))} (limit), its η* drifts by "
        f"{_words(pick('drift', VARIANT_NAMES['abs'], lim))} (limit) per doubling.",
        f" After training, at L = {L}, κ is relu {fmt_optimum(ks['relu'], value=float)}"
        f", |x| {fmt_optimum(ks['abs'], value=float)}, κ(|x|) − κ(relu) "
        f"{_words(k_rows[0] if k_rows else None)} (Fig. 19).",
        f" With |x| and pre-LayerNorm (Fig. 12) depth-μP's η* drifts by "
        f"{_words(pick('drift', VARIANT_NAMES['abs-ln'], lim))} (limit) and "
        f"{_words(pick('drift', VARIANT_NAMES['abs-ln'], net))} (networks) per "
        f"doubling, and its lowest loss changes by "
        f"{_words(pick(gain, VARIANT_NAMES['abs-ln'], lim))} (limit) from L = "
        f"{min(Ls)} to {max(Ls)}; the block multiplier only with preLN is depth-μP "
        "with preLN at a rate √L higher (U and V frozen), so its drift is this one "
        "minus ½ and is not run."]
    return "".join(parts)
