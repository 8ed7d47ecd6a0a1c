"""Findings and conclusion of study 11 (:mod:`._branch_run`): the optimal η_c per depth
under α = ½ and α = 1, its drift per doubling of L in the limit and in the networks,
the controls (μP without depth scaling, the standard parametrization), the lowest
loss against depth, and the
feature diversity exponent κ.

Optima are vertices of the local parabola in log η_c (:mod:`._fit`), with 95%
studentised bootstrap intervals over seeds: the limit's own seeds (the same at every
grid point, α and depth, so that every difference below is paired) or the networks'
seeds. κ = 1 − s/2 with s the least-squares slope of log D(ε) against log ε over
ε ∈ [1/16, 1/2] (TP VI Def. 7.6: (1/√n)‖h_{t+ε} − h_t‖ = Ω(ε^{1−κ})), per limit seed,
with a studentised bootstrap interval over those seeds. Every verdict is computed from
the interval, whichever way it comes out.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ..._fit import bootstrap_replicates
from .._report import Finding
from ._fit import Optimum, compare_optima
from ._optima import depth_drift, present, rule_optima, seed_matrix
from ._adam_report import CONTROL_DRIFT_WORDS, rule_drift_rows
from ._report import (boot_min, fmt_optimum, own_grid_drift_rows, own_grid_edge_rows,
                      own_grid_gain_rows, own_grid_words, signed_finding)

__all__ = ["summarize_branch_transfer", "conclude_branch_transfer", "branch_optima",
           "kappa", "adam_view", "RULES", "CONTROL_NAMES", "KAPPA_EPS"]

#: The branch exponents and how the report names them.
RULES = {0.5: "depth-μP (α = ½)", 1.0: "CompleteP (α = 1)"}
#: The controls (:data:`._branch_run.CONTROLS`) and how the report names them.
CONTROL_NAMES = {"mup": "μP without depth scaling (control)",
                 "sp": "standard parametrization (control)"}
_CONTROL_CLAIM = {
    "mup": "η* shifts with depth: branch √(T/n) sums L updates of Θ(T) (paper 000 "
           "Figs. 1, B.2: SGD; TP VI Fig. 10 bottom: Adam)",
    "sp": "η* shifts with depth, and the loss degrades (TP VI §10.2, Fig. 10 bottom)"}
#: The ε range of κ's fit (in units of T).
KAPPA_EPS = (1 / 16, 1 / 2)
_METRICS = {"train": "running-mean train loss (last K/4 steps)",
            "probe": "test loss after K steps"}
_CLAIM = {0.5: "one η* at every depth: drift 0 (paper 000 Figs. 1, B.2: SGD; TP VI "
               "Figs. 2 left, 10 top: Adam)",
          1.0: "one η* at every depth: drift 0 (the rate keeps each layer's update "
               "Θ(T/L); paper 000 App. M, Fig. M.1); TP VI Fig. 11: (α, γ) = (1, 0) "
               "shifts η* up with depth (Adam; post-nonlinearity blocks with mean "
               "subtraction, its §6.3)"}
_KAPPA_CLAIM = {0.5: "κ = ½ (TP VI Claim 7.5, Fig. 17 left)",
                1.0: "κ → 0 as L → ∞ after training (TP VI Claim 7.4, Fig. 17 right)"}


def branch_optima(ds: xr.Dataset, alpha: float, metric: str,
                  width: int | None = None) -> dict[int, Optimum]:
    """{L: optimum of log η_c} of the limit (``width`` None) or of the networks at
    ``width`` under branch exponent ``alpha`` (:func:`._optima.rule_optima`)."""
    return rule_optima(ds, metric, width, branch_exponent=alpha)


def _task(ds: xr.Dataset) -> str:
    """The task and optimizer of a view (:func:`adam_view` sets ``optimizer``)."""
    return f"ten-class digits, {'Adam' if ds.attrs.get('optimizer') == 'adam' else 'SGD'}"


def adam_view(ds: xr.Dataset) -> xr.Dataset:
    """Study 11's Adam runs (``adam_net_*``, ``adam_lim_*`` over ``adam_eta_c``) under
    the SGD runs' names, so that every finding of the exponents applies to them."""
    names = [k for k in ds.data_vars if k.startswith(("adam_net_", "adam_lim_"))]
    view = ds[names].rename({k: k.removeprefix("adam_") for k in names})
    view = view.drop_vars("eta_c", errors="ignore").rename(adam_eta_c="eta_c")
    view.attrs = dict(ds.attrs, optimizer="adam")
    return view


def _where(ds: xr.Dataset, rule: float | str, metric: str, width: int | None) -> str:
    who = "limit (n = ∞ at each L)" if width is None else f"networks, n = {width}"
    name = CONTROL_NAMES[rule] if isinstance(rule, str) else RULES[rule]
    return f"{_task(ds)}, {name}, {who}, {_METRICS[metric]}"


def _control_row(ds: xr.Dataset, metric: str, control: str) -> list[Finding]:
    """A control's drift of η*: a baseline that should not transfer."""
    return own_grid_drift_rows(ds, control, metric,
                               _where(ds, control, metric, max(ds["width"].values.tolist())),
                               _CONTROL_CLAIM[control], CONTROL_DRIFT_WORDS)


def _control_gain(ds: xr.Dataset, metric: str, control: str) -> list[Finding]:
    """A control's lowest loss at the deepest depth it trained at, minus at the
    shallowest (the standard parametrization's loss degrades with depth, TP VI)."""
    return own_grid_gain_rows(
        ds, control, metric, _where(ds, control, metric, max(ds["width"].values.tolist())),
        "no claim on this task (TP VI: SP's loss degrades at large depth, Fig. 10 bottom)")


def _control_edge(ds: xr.Dataset, control: str) -> list[Finding]:
    """A control's drift of the largest stable rate per doubling of L."""
    n = max(ds["width"].values.tolist())
    return own_grid_edge_rows(ds, control, f"{_task(ds)}, {CONTROL_NAMES[control]}, "
                              f"networks, n = {n}", _CONTROL_CLAIM[control])


def _contrast(ds: xr.Dataset, metric: str) -> list[Finding]:
    """The limit's drift under α = 1 minus under α = ½ (the same seeds)."""
    drifts = {a: branch_optima(ds, a, metric) for a in RULES}
    if any(len(o) < 2 for o in drifts.values()):
        return []
    diff = compare_optima(depth_drift(drifts[1.0]), depth_drift(drifts[0.5]))
    return [signed_finding(
        f"{_task(ds)}, limit (n = ∞ at each L), {_METRICS[metric]}",
        "drift, α = 1 − α = ½", diff, "both transfer: no difference",
        ("α = 1's η* rises faster", "α = 1's η* falls faster with depth",
         "no difference between the exponents resolved"))]


def _best(ds: xr.Dataset, alpha: float, metric: str, L: int) -> Optimum | None:
    """The limit's lowest loss over η_c at depth L (bootstrap over its seeds, the
    same bootstrap draws for every cell: paired)."""
    cell = ds[f"lim_{metric}"].sel(branch_exponent=alpha, depth=L)
    return boot_min(seed_matrix(cell, "lim_seed"), 0) if present(cell) else None


def _depth_gain(ds: xr.Dataset, metric: str) -> list[Finding]:
    """Lowest loss at the deepest minus the shallowest L per α, and the difference of
    those gains between the exponents (which gains more from depth)."""
    Ls = ds["depth"].values.tolist()
    L0, L1 = min(Ls), max(Ls)
    gains, rows = {}, []
    for alpha in RULES:
        ends = [_best(ds, alpha, metric, L) for L in (L0, L1)]
        if None in ends:
            return rows
        gains[alpha] = compare_optima(ends[1], ends[0])
        rows.append(signed_finding(
            _where(ds, alpha, metric, None), f"lowest loss over η_c: L = {L1} − L = {L0}",
            gains[alpha], "no claim on this task (TP VI: depth-μP's loss falls with "
            "depth on CIFAR-10, Fig. 10 top)",
            ("deeper is worse at its best η_c", "deeper is better at its best η_c",
             "no change with depth resolved")))
    rows.append(signed_finding(
        f"{_task(ds)}, limit (n = ∞), {_METRICS[metric]}",
        f"depth gain (L = {L1} − L = {L0}), α = 1 − α = ½",
        compare_optima(gains[1.0], gains[0.5]),
        "depth-μP uses depth best: maximal feature diversity (TP VI Claim 7.5)",
        ("depth costs α = 1 more (or helps it less)", "depth costs α = 1 less (or helps "
         "it more)", "no difference in the change with depth resolved")))
    best = [_best(ds, a, metric, L1) for a in (1.0, 0.5)]
    rows.append(signed_finding(
        f"{_task(ds)}, limit (n = ∞), L = {L1}, {_METRICS[metric]}",
        "lowest loss over η_c: α = 1 − α = ½", compare_optima(*best),
        "no claim (TP VI compares the exponents by feature diversity, §7)",
        ("α = 1 is worse at its best η_c", "α = 1 reaches a lower loss",
         "no difference resolved")))
    return rows


def kappa(ds: xr.Dataset, value, L: int, phase: str, dim: str = "branch_exponent"
          ) -> Optimum:
    """κ = 1 − s/2 per limit seed (module docstring) of the runs at ``dim`` = ``value``
    (the branch exponent α; study 13: the activation), its seed mean and bootstrap
    (the same resampled seeds for every ``value``, so differences are paired)."""
    eps = ds["kappa_eps"].sel(kappa_depth=L).values
    keep = (eps >= KAPPA_EPS[0] * (1 - 1e-9)) & (eps <= KAPPA_EPS[1] * (1 + 1e-9))
    D = ds["kappa_D"].sel({dim: value, "kappa_depth": L, "phase": phase}).values
    per_seed = np.array([1 - np.polyfit(np.log(eps[keep]), np.log(d[keep]), 1)[0] / 2
                         for d in D if np.all(np.isfinite(d[keep]))])
    reps = bootstrap_replicates(per_seed, np.mean, 1000, axis=0, seed=0)
    return Optimum(float(per_seed.mean()), reps, len(per_seed) - 1)


def _kappa_rows(ds: xr.Dataset) -> list[Finding]:
    """κ per α, depth and phase (init, after training)."""
    rows = []
    for alpha in RULES:
        for L in ds["kappa_depth"].values.tolist():
            for phase in ("init", "trained"):
                k = kappa(ds, alpha, L, phase)
                lo, hi = k.ci()
                verdict = ("consistent with ½" if lo <= 0.5 <= hi else
                           "below ½" if hi < 0.5 else "above ½")
                when = "at initialization" if phase == "init" else "after K − 1 steps"
                rows.append(Finding(
                    f"ten-class digits, SGD, limit (n = ∞), L = {L}, {RULES[alpha]}, "
                    f"η_c = {ds.attrs['kappa_eta']:g}, {when}",
                    "feature diversity exponent κ (slope of log E|h_{t+ε} − h_t|², "
                    "ε = 1/16…1/2)", k.estimate, (lo, hi), _KAPPA_CLAIM[alpha], verdict))
    return rows


def summarize_branch_transfer(ds: xr.Dataset) -> list[Finding]:
    """Study 11's findings: drifts of η* under both exponents (limit and networks,
    train and test loss), their contrast, the lowest loss against depth and between
    the exponents, under SGD and (when run) Adam; the controls' drifts and lowest
    losses; and κ."""
    out = _exponent_rows(ds)
    for metric in _METRICS:
        for control in CONTROL_NAMES:
            out += _control_row(ds, metric, control) + _control_gain(ds, metric, control)
    for control in CONTROL_NAMES:
        out += _control_edge(ds, control)
    if "adam_net_train" in ds:
        out += _exponent_rows(adam_view(ds))
    return out + _kappa_rows(ds)


def _exponent_rows(ds: xr.Dataset) -> list[Finding]:
    """The exponents' findings under one optimizer (the SGD runs, or
    :func:`adam_view`): drifts of η* (limit and networks, train and test loss), their
    contrast, and the lowest loss against depth and between the exponents."""
    out = []
    for metric in _METRICS:
        for alpha in RULES:
            out += rule_drift_rows(ds, metric, lambda w, a=alpha: _where(ds, a, metric, w),
                                   _CLAIM[alpha], branch_exponent=alpha)
        out += _contrast(ds, metric)
    for metric in _METRICS:
        out += _depth_gain(ds, metric)
    return out


def _drifts_words(ds: xr.Dataset) -> list[str] | None:
    """'name: drift d [lo, hi]' of the limit's η* (train loss) per exponent; None
    when a drift has fewer than two depths."""
    parts = []
    for alpha, name in RULES.items():
        lim = branch_optima(ds, alpha, "train")
        if len(lim) < 2:
            return None
        parts.append(f"{name}: drift {fmt_optimum(depth_drift(lim), value=float)}")
    return parts


def conclude_branch_transfer(ds: xr.Dataset) -> str:
    """The answer in numbers: the limit's drift under each α (SGD, and Adam when
    run), the controls', and κ after training at the deepest κ depth."""
    parts = _drifts_words(ds)
    if parts is None:
        return "Not enough data for a conclusion."
    adam = _drifts_words(adam_view(ds)) if "adam_net_train" in ds else None
    adam = (f" Under Adam (W at lr η_c·(T/L)^(1−α)/√n) the limit's drifts are "
            f"{'; '.join(adam)}." if adam else "")
    controls = "; ".join(f"{CONTROL_NAMES[c].removesuffix(' (control)')}: "
                         f"{own_grid_words(ds, c)}" for c in CONTROL_NAMES)
    L = max(ds["kappa_depth"].values.tolist())
    kap = "; ".join(f"{RULES[a]} {fmt_optimum(kappa(ds, a, L, 'trained'), value=float)}"
                    for a in RULES)
    eps = ds["kappa_eps"].sel(kappa_depth=L).values
    half = int(np.nanargmin(np.abs(eps - 0.5)))
    amp = {a: float(ds["kappa_D"].sel(branch_exponent=a, kappa_depth=L, phase="init")
                    .mean("lim_seed")[half]) for a in RULES}
    return ("On ten-class digits (SGD, running-mean train loss), the limit's optimal η_c "
            "per doubling of L has " + "; ".join(parts) + " in log₂ η* (95% intervals)."
            f"{adam} Under SGD the controls (networks; without the 1/√L their relu features grow "
            f"geometrically with depth at initialization) drift: {controls}. After "
            f"training (K − 1 steps), at L = {L}, the feature diversity exponent is {kap}. "
            "At initialization both slopes give κ = ½, but under α = 1 the Brownian "
            f"layers' amplitude falls like 1/L (D(ε = ½) = {amp[1.0]:.3g} against "
            f"{amp[0.5]:.3g} under depth-μP at L = {L}): in TP VI's order of limits "
            "(L → ∞ first) CompleteP's features at initialization do not vary with depth "
            "at all, so its κ = ½ there is a finite-depth effect. The table gives the "
            "networks, the test loss, the lowest loss against depth and between the "
            "exponents, and κ at initialization.")
