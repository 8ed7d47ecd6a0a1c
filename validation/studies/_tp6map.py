"""Study 14: Tensor Programs VI's (α, γ) map, drawn from measurements (paper 001,
Def. 6.2, Claims 7.1–7.3 and 7.6; issue 53 item 4).

Networks: paper 001's block (§6.3, ``block="post-nonlin-ms"``), in nfd's units
(weights N(0, 1), τ = T/L, T = 1: §6.3's formula itself)

    h_0 = Ux/√d,   u_ℓ = W_ℓ h_{ℓ−1}/√n,   h_ℓ = h_{ℓ−1} + τ^α·MS(φ(u_ℓ)),   f = vᵀh_L/n,

so that paper 001's x^ℓ is h_ℓ here and its pre-activation h^ℓ = W^ℓx^{ℓ−1} is u_ℓ.
W_ℓ learns at paper 001's rate η n⁻¹ L^{−γ} (Def. 6.2 with δ = α: torch lr
η_c·n·τ^{γ−α} under SGD, η_c·τ^γ/√n under Adam; docs/guide/tp6_block.md). U and v
are frozen (``trainable=("W",)``, the protocol of paper 001's Figs. 10–12): under μP
a trained U or v moves h_L and f by Θ(1) at every (α, γ), which would hide what the
hidden layers do. φ = gelu (smooth and not odd, so Mean Subtraction matters and
Def. 7.7's remainder is second order in the update; relu's kink makes it order 3/2,
which moves Claim 7.6's exponents by (½)γ and closer to the boundary).

Each network is trained for K steps of batch B (mse, the synthetic tanh teacher) at
one η_c, in float64, and measured on Q held-out probe inputs at initialization (t = 0)
and after the K steps (t = K), every quantity a root mean square over neurons and
probes, then (``amax``) its largest value over layers ℓ:

* ``x_init``  rms h_ℓ(0)  and ``f_init`` rms f(0):  Def. 7.2's stability at init;
* ``u_init``  rms u_ℓ(0):  Def. 7.3's faithfulness at init;
* ``dx``  rms (h_ℓ(K) − h_ℓ(0))  and ``df`` rms (f(K) − f(0)):  Def. 7.2's stability
  during training and Def. 7.4's (non)triviality;
* ``du``  rms (u_ℓ(K) − u_ℓ(0)):  Def. 7.5's feature learning and Def. 7.3's
  faithfulness during training (h_t = h_0 + Δh stays Θ(1) iff Δh does not grow);
* ``lin``  L·τ^α·rms MS(φ(u_K) − φ(u_0) − φ′(u_0) ⊙ (u_K − u_0)), u_t = W_t z/√n with
  z = h_{ℓ−1}(K) (the features after training): Def. 7.7's remainder times L, so that
  layerwise linearization (remainder o(L⁻¹)) is ``lin`` decaying with L.

Each quantity's growth exponent e (value ∝ L^e) is fitted over depths by
:func:`validation._fit.fit_power_law` (``plateau=False``, log least squares, 95%
percentile interval from the paired bootstrap over seeds). :func:`classify` turns the
exponents into a class by the rules of its docstring, without reference to the
claims; :func:`tp6_class` is what Claims 7.1–7.3 and 7.6 predict, set beside it.
"""

from __future__ import annotations

import math
from itertools import product
from typing import Sequence

import numpy as np
import torch
import xarray as xr

import nfd
from nfd.schema import base_attrs

from .._fit import PowerFit, fit_power_law, stored_fit
from .._sweep import run_jobs, study_args
from ..data import synthetic_task
from ..networks import ResNetEnsemble
from ._plotting import figure, legend_outside, save
from ._report import Finding, exponent_finding

__all__ = ["run_tp6_map", "summarize_tp6_map", "conclude_tp6_map", "plot_tp6_map",
           "classify", "beyond", "tp6_class", "measure_point", "CLASSES", "MARGIN"]

#: The measured quantities (module docstring), in the order the rules read them.
OBSERVABLES = ("x_init", "f_init", "u_init", "dx", "df", "du", "lin")
_LABELS = {"x_init": "rms x^ℓ at init (max over ℓ)", "f_init": "rms f at init",
           "u_init": "rms h^ℓ = W^ℓx^{ℓ−1} at init (max over ℓ)",
           "dx": "rms Δx^ℓ after training (max over ℓ)", "df": "rms Δf after training",
           "du": "rms Δh^ℓ after training (max over ℓ)",
           "lin": "L × Def. 7.7's remainder (max over ℓ)"}
#: An exponent grows (vanishes) when its 95% interval lies above +MARGIN (below
#: −MARGIN), and is bounded (bounded away from 0) when it lies below +MARGIN (above
#: −MARGIN): half the grid's spacing in γ (¼), the smallest exponent the claims
#: predict off the line α + γ = 1 on this grid, so that one grid step is resolved
#: and finite-depth drifts of the exponents below ⅛ are not read as growth.
MARGIN = 0.125
#: The classes, in the order of the rules of :func:`classify`.
CLASSES = ("unstable", "unfaithful", "trivial", "no feature learning",
           "feature learning, layerwise linearized", "feature learning, not linearized",
           "undecided")
_OPTIMIZERS = {"sgd": ("SGD", 0.5), "adam": ("Adam", 0.02)}  # title, η_c
_TASK = dict(kind="tanh", d=16, activation="gelu", T=1.0, probes=32)
_CONFIG = {
    True: dict(widths=[32], depths=[4, 8, 16], seeds=4, steps=2, batch=4,
               alphas=[0.5, 1.0], gammas=[0.0, 0.5]),
    False: dict(widths=[64, 128], depths=[8, 16, 32, 64, 128], seeds=8, steps=4, batch=8,
                alphas=[0.0, 0.25, 0.5, 0.75, 1.0, 1.25],
                gammas=[-0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0]),
}


def _rms(t: torch.Tensor) -> torch.Tensor:
    """Root mean square over the last two axes (probes, neurons)."""
    return t.square().mean((-2, -1)).sqrt()


def _remainder(net: ResNetEnsemble, W0: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Def. 7.7's remainder τ^α·MS(φ(u_K) − φ(u_0) − φ′(u_0) ⊙ (u_K − u_0)),
    u_t = W_t z/√n, rms per (seed, layer): z (S, L, Q, n) the inputs of the layers."""
    u0 = z @ W0.mT / math.sqrt(net.n)
    uK = z @ net.W.mT / math.sqrt(net.n)
    r = net.act.phi(uK) - net.act.phi(u0) - net.act.dphi(u0) * (uK - u0)
    return net.s * _rms(r - r.mean(-1, keepdim=True))


def measure_point(*, alpha: float, gamma: float, optimizer: str, depth: int, width: int,
                  seeds: Sequence[int], steps: int, batch: int, data_seed: int,
                  activation: str = _TASK["activation"], device=None) -> xr.Dataset:
    """Train S networks of paper 001's block at (α, γ) and measure them (module
    docstring).

    Parameters
    ----------
    alpha, gamma : float
        Paper 001's α ≥ 0 and γ (Def. 6.2).
    optimizer : {"sgd", "adam"}
        ``torch.optim.SGD`` or ``Adam`` at η_c of :data:`_OPTIMIZERS`.
    depth, width : int
        L and n.
    seeds : sequence of int
        Network seeds.
    steps, batch : int
        K steps of B samples.
    data_seed : int
        Seed of the stream and the probes (the teacher is the stream's).
    activation : str
        φ (the study's: gelu).
    device : str, optional

    Returns
    -------
    xarray.Dataset
        :data:`OBSERVABLES` (seed,), NaN where a network's numbers are not finite,
        and ``finite`` (seed,) 1/0.
    """
    d = _TASK["d"]
    X, y = synthetic_task(_TASK["kind"], steps * batch, d, seed=data_seed)
    Xp, _ = synthetic_task(_TASK["kind"], _TASK["probes"], d, seed=data_seed + 1,
                           teacher_seed=data_seed)
    net = ResNetEnsemble(d, width=width, depth=depth, activation=activation,
                         T=_TASK["T"], seeds=list(seeds), block="post-nonlin-ms",
                         branch_exponent=alpha, lr_exponent=gamma, optimizer=optimizer,
                         eta_c=_OPTIMIZERS[optimizer][1], trainable=("W",), device=device,
                         dtype=torch.float64)
    loss = nfd.get_loss("mse")
    start, W0 = net.propagate(Xp), net.W.clone()
    Xt, Yt = (torch.as_tensor(a, device=net.device, dtype=net.dtype) for a in (X, y))
    for k in range(steps):
        fp = net.forward_pass(Xt[k * batch:(k + 1) * batch])
        chi = loss.grad(fp.f, Yt[k * batch:(k + 1) * batch].expand_as(fp.f))
        net.apply_update(net.backward_pass(fp, chi))
    end = net.propagate(Xp)
    out = {"x_init": _rms(start["h"]).amax(1), "f_init": _rms(start["f"][..., None]),
           "u_init": _rms(start["u"]).amax(1), "dx": _rms(end["h"] - start["h"]).amax(1),
           "df": _rms((end["f"] - start["f"])[..., None]),
           "du": _rms(end["u"] - start["u"]).amax(1),
           "lin": depth * _remainder(net, W0, end["h"][:, :depth]).amax(1)}
    values = torch.stack([out[k] for k in OBSERVABLES]).cpu().numpy()
    finite = np.isfinite(values).all(0)
    values[:, ~finite] = np.nan
    ds = xr.Dataset({k: ("seed", v) for k, v in zip(OBSERVABLES, values)})
    ds["finite"] = ("seed", finite.astype(np.int8))
    return ds.assign_coords(seed=list(seeds))


def run_tp6_map(*, quick: bool = False, store=None, scheduler: str | None = None,
                progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 14: the measurements of :func:`measure_point` over (width, optimizer, α,
    γ, depth).

    Parameters
    ----------
    quick : bool
        Width 32, depths 4–16, 4 seeds, 2 steps of 4, α ∈ {½, 1} × γ ∈ {0, ½};
        instead of widths 64 and 128, depths 8–128, 8 seeds, 4 steps of 8,
        α ∈ {0, ¼, …, 5/4} × γ ∈ {−½, −¼, …, 1} (:data:`_CONFIG`).
    store, scheduler, progress
        See :func:`validation._sweep.run_jobs`.
    device : str or torch.device, optional
    seed : int
        First network seed and the stream's seed.

    Returns
    -------
    xarray.Dataset
        :data:`OBSERVABLES` and ``finite`` with dims (width, optimizer, alpha, gamma,
        depth, seed); attrs: every parameter and the fits (:func:`fits`).
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    seeds = [seed + s for s in range(cfg["seeds"])]
    axes = dict(width=cfg["widths"], optimizer=list(_OPTIMIZERS), alpha=cfg["alphas"],
                gamma=cfg["gammas"], depth=cfg["depths"])
    jobs = [dict(zip(axes, key), seeds=seeds, steps=cfg["steps"], batch=cfg["batch"],
                 data_seed=seed, device=dev) for key in product(*axes.values())]
    parts = run_jobs(measure_point, jobs, study="tp6_map", store=store,
                     scheduler=scheduler, progress=progress)
    flat = xr.concat([p.drop_attrs() for p in parts], "cell")
    shape = [len(v) for v in axes.values()] + [len(seeds)]
    ds = xr.Dataset({k: ((*axes, "seed"), flat[k].values.reshape(shape))
                     for k in (*OBSERVABLES, "finite")}, coords=dict(axes, seed=seeds))
    ds.attrs = base_attrs(study="tp6_map", quick=quick, seed=seed, block="post-nonlin-ms",
                          style="post", trainable="W", margin=MARGIN,
                          eta_c_sgd=_OPTIMIZERS["sgd"][1], eta_c_adam=_OPTIMIZERS["adam"][1],
                          **{k: v for k, v in cfg.items() if k not in ("alphas", "gammas")},
                          **_TASK)
    fits(ds)
    return ds


def points(ds: xr.Dataset) -> list[tuple[int, str, float, float]]:
    """Every (width, optimizer, α, γ) of the study."""
    return list(product(*(ds[k].values.tolist() for k in ("width", "optimizer", "alpha",
                                                          "gamma"))))


def fits(ds: xr.Dataset) -> dict[tuple[int, str, float, float, str], PowerFit | None]:
    """value ∝ L^(−q) per (width, optimizer, α, γ, observable), bootstrap over seeds
    paired across depths, kept in ``ds.attrs``; None where a network diverged (a NaN)."""
    L = ds["depth"].values.astype(float)
    out = {}
    for (n, o, a, g), name in product(points(ds), OBSERVABLES):
        v = ds[name].sel(width=n, optimizer=o, alpha=a, gamma=g).transpose("depth",
                                                                            "seed").values
        if not np.isfinite(v).all():
            out[(n, o, a, g, name)] = None
            continue
        prefix = f"n{n}_{o}_a{a:g}_g{g:g}_{name}".replace("-", "m").replace(".", "p")
        out[(n, o, a, g, name)] = stored_fit(ds.attrs, prefix,
                                             lambda v=v: fit_power_law(v, L=L, plateau=False))
    return out


def growth(fit: PowerFit) -> tuple[float, float, float, bool]:
    """The growth exponent e = −q of ``fit`` (value ∝ L^e), its 95% interval, and
    whether it is a measurement; an estimate pinned at the search bound is one
    (|e| ≥ 6, the interval's open end), any other unresolved estimate is not."""
    est, (lo, hi) = -fit.estimate["q"], sorted(-x for x in fit.ci["q"])
    pinned = fit.pinned("q", fit.estimate["q"]) is not None
    return est, lo, hi, pinned or not fit.unresolved("q")


def beyond(interval: tuple[float, float], side: str, margin: float = MARGIN) -> str:
    """One-sided decision on a growth exponent's 95% interval (lo, hi): for
    ``side="up"``, ``"yes"`` if lo > margin (it grows), ``"no"`` if hi ≤ margin
    (bounded), else ``"undecided"``; for ``side="down"``, ``"yes"`` if hi < −margin
    (it vanishes), ``"no"`` if lo ≥ −margin, else ``"undecided"``. A NaN end (an
    estimate that is no measurement) is undecided."""
    lo, hi = interval
    if side == "up":
        return "yes" if lo > margin else "no" if hi <= margin else "undecided"
    if side == "down":
        return "yes" if hi < -margin else "no" if lo >= -margin else "undecided"
    raise ValueError(f"side must be 'up' or 'down', got {side!r}")


#: The rules of :func:`classify`, in order: (class, [(observable, side), ...]); a
#: class applies when one of its tests says "yes".
RULES = (
    ("unstable", (("x_init", "up"), ("f_init", "up"), ("dx", "up"), ("df", "up"))),
    ("unfaithful", (("du", "up"), ("u_init", "up"), ("u_init", "down"))),
    ("trivial", (("df", "down"),)),
    ("no feature learning", (("du", "down"),)),
)


def classify(exponents: dict[str, tuple[float, float]] | None,
             margin: float = MARGIN) -> tuple[str, str]:
    """The class of one (α, γ) point from the 95% intervals of its growth exponents
    (value ∝ L^e), and the rule that settled it.

    ``None`` (a network's numbers were not finite) is **unstable**. Otherwise, in
    order, the first rule that decides (:func:`beyond`, margin ⅛):

    1. **unstable** if x_init or f_init (Def. 7.2 at init), dx or df (Def. 7.2
       during training) grows;
    2. **unfaithful** if du grows (h_t = h_0 + Δh leaves Θ(1), Def. 7.3), or u_init
       grows or vanishes;
    3. **trivial** if df vanishes (f_t − f_0 → 0, Def. 7.4);
    4. **no feature learning** if du vanishes (Def. 7.5);
    5. else (du = Θ(1)): **feature learning, layerwise linearized** if lin (L × Def.
       7.7's remainder) vanishes, **feature learning, not linearized** if not.

    A rule none of whose tests says "yes" but one says "undecided" makes the point
    **undecided** (the later rules are not read).

    Parameters
    ----------
    exponents : dict or None
        ``{observable: (lo, hi)}`` for every name in :data:`OBSERVABLES` (NaN ends
        for an estimate that is no measurement).
    margin : float
        See :func:`beyond`.

    Returns
    -------
    (str, str)
        A name from :data:`CLASSES` and the reason.
    """
    if exponents is None:
        return "unstable", "a network's numbers were not finite"
    missing = set(OBSERVABLES) - set(exponents)
    if missing:
        raise ValueError(f"exponents: missing {sorted(missing)}")
    rules = RULES + ((CLASSES[4], (("lin", "down"),)),)
    for name, tests in rules:
        said = [(k, side, beyond(exponents[k], side, margin)) for k, side in tests]
        hits = [f"{k} {'grows' if side == 'up' else 'vanishes'}"
                for k, side, v in said if v == "yes"]
        if hits:
            return name, ", ".join(hits)
        open_ = [k for k, _, v in said if v == "undecided"]
        if open_:
            return "undecided", f"{', '.join(open_)} undecided (rule: {name})"
    return CLASSES[5], "du = Θ(1), lin does not vanish"


def tp6_class(alpha: float, gamma: float) -> str:
    """What paper 001 predicts at (α, γ), the same for SGD and Adam in Def. 6.2's γ
    (δ = α): unstable for α < ½ (Claim 7.1) or α + γ < 1 (Claim 7.2), trivial for
    α + γ > 1 (Claim 7.2), and on α + γ = 1 unfaithful for α > 1 (Claim 7.3),
    layerwise linearized for α ∈ [½, 1) (Claim 7.6) and not linearized at α = 1;
    every point on the line with α ∈ [½, 1] learns features (Def. 7.5)."""
    s = alpha + gamma
    if alpha < 0.5 or s < 1 - 1e-9:
        return "unstable"
    if s > 1 + 1e-9:
        return "trivial"
    if alpha > 1:
        return "unfaithful"
    return CLASSES[4] if alpha < 1 else CLASSES[5]


def point_exponents(fit_of: dict, point: tuple[int, str, float, float]
                    ) -> dict[str, tuple[float, float]] | None:
    """The growth exponents' intervals at one (width, optimizer, α, γ), (NaN, NaN)
    for an estimate that is no measurement (None if a network diverged there)."""
    point = {k: fit_of[(*point, k)] for k in OBSERVABLES}
    if any(f is None for f in point.values()):
        return None
    out = {}
    for k, f in point.items():
        _, lo, hi, ok = growth(f)
        out[k] = (lo, hi) if ok else (math.nan, math.nan)
    return out


def classes(ds: xr.Dataset) -> dict[tuple[int, str, float, float], tuple[str, str]]:
    """:func:`classify` of every (width, optimizer, α, γ) of the study."""
    fit_of = fits(ds)
    return {p: classify(point_exponents(fit_of, p)) for p in points(ds)}


def summarize_tp6_map(ds: xr.Dataset) -> list[Finding]:
    """The growth exponents on paper 001's line α + γ = 1 (α ≥ ½), judged against
    the scalings behind its claims (App. F.4; the exponents are this module's
    reading of them, the claims state only bounded, vanishing or growing): Δx of
    order 1 (e = 0), Δh = W_0Δx + ΔW x of order 1 for α ≤ 1 and ∝ L^{−γ} = L^{α−1}
    for α > 1 (Claim 7.3), and L × Def. 7.7's remainder, second order in
    ΔW x = Θ(L^{−γ}) for smooth φ, ∝ L^{1−α−2γ} = L^{α−1} (Claim 7.6: o(1) iff
    α < 1)."""
    fit_of, out = fits(ds), []
    for n, o, a, g in points(ds):
        if a < 0.5 or abs(a + g - 1) > 1e-9:
            continue
        claims = {"dx": (0.0, "e = 0: Δx^ℓ = Θ(1) on α + γ = 1 (Claim 7.2)"),
                  "du": (max(a - 1, 0.0), "e = max(−γ, 0): Δh^ℓ = W_0Δx + ΔW x = "
                         "Θ(1) + Θ(L^−γ), growing iff α > 1 (Claim 7.3)"),
                  "lin": (a - 1, "e = 1 − α − 2γ = α − 1 (second order in ΔW x = "
                          "Θ(L^−γ), smooth φ); Claim 7.6: e < 0 iff α < 1")}
        for name, (claimed, claim) in claims.items():
            fit = fit_of[(n, o, a, g, name)]
            if fit is None:
                continue
            out.append(exponent_finding(
                f"n = {n}, {_OPTIMIZERS[o][0]}, (α, γ) = ({a:g}, {g:g}): {_LABELS[name]}",
                "growth exponent e (∝ L^e)", fit, "q", claimed, claim, scale=-1.0))
    return out


def _exponent_text(fit: PowerFit | None) -> str:
    """e [lo, hi] of a fit, or "—" for a diverged point."""
    if fit is None:
        return "—"
    est, lo, hi, ok = growth(fit)
    return f"{est:+.2f} [{lo:+.2f}, {hi:+.2f}]" + ("" if ok else " (not resolved)")


def conclude_tp6_map(ds: xr.Dataset) -> str:
    """The map as a table: per (optimizer, α, γ) the measured class at each width,
    the rule that settled it at the largest, paper 001's class and the growth
    exponents with their intervals at the largest width; then the count of
    agreements per width."""
    fit_of, got = fits(ds), classes(ds)
    widths, top = ds["width"].values.tolist(), int(ds["width"].values[-1])
    head = ("| optimizer | α | γ | " + " | ".join(f"class, n = {n}" for n in widths)
            + f" | rule (n = {top}) | TP VI | agrees | "
            + " | ".join(f"e({k})" for k in OBSERVABLES) + " |")
    lines = [f"Growth exponents e (value ∝ L^e) at n = {top}, 95% intervals; the rules "
             "are those of `validation.studies._tp6map.classify`.", "", head,
             "|" + "---|" * (6 + len(widths) + len(OBSERVABLES))]
    tally = {n: [0, 0] for n in widths}  # decided, agreeing
    for n, o, a, g in points(ds):
        if n != top:
            continue
        want = tp6_class(a, g)
        found = [got[(m, o, a, g)][0] for m in widths]
        for m, cls in zip(widths, found):
            tally[m][0] += cls != "undecided"
            tally[m][1] += cls == want
        decided = [c for c in found if c != "undecided"]
        verdict = "—" if not decided else ("yes" if all(c == want for c in decided)
                                           else "**no**")
        cells = [_OPTIMIZERS[o][0], f"{a:g}", f"{g:g}", *found, got[(n, o, a, g)][1],
                 want, verdict]
        cells += [_exponent_text(fit_of[(n, o, a, g, k)]) for k in OBSERVABLES]
        lines.append("| " + " | ".join(cells) + " |")
    total = len(got) // len(widths)
    lines.append("\n" + "; ".join(
        f"at n = {m}, {d} of {total} points are decided and {k} of them agree with "
        "paper 001's class" for m, (d, k) in tally.items()) + " (Claims 7.1–7.3, 7.6).")
    return "\n".join(lines)


_STYLE = {"unstable": ("X", "tab:red"), "unfaithful": ("D", "tab:purple"),
          "trivial": ("s", "0.55"), "no feature learning": ("v", "tab:brown"),
          CLASSES[4]: ("o", "tab:blue"), CLASSES[5]: ("P", "tab:green"),
          "undecided": ("$?$", "k")}


def _draw_claims(ax, alphas: Sequence[float], gammas: Sequence[float]) -> None:
    """Paper 001's boundaries: α = ½ (Claim 7.1), α + γ = 1 (Claim 7.2), and on
    that line α = 1 (Claims 7.3, 7.6); its regions named in grey."""
    a_lo, a_hi = min(alphas) - 0.15, max(alphas) + 0.15
    g_lo, g_hi = min(gammas) - 0.35, max(gammas) + 0.2
    ax.axvline(0.5, color="k", ls="--", lw=1)
    a = np.linspace(a_lo, a_hi, 2)
    ax.plot(a, 1 - a, color="k", ls="-", lw=1)
    ax.plot([1.0], [0.0], marker="|", ms=18, color="k", mew=1.5)
    grey = dict(color="0.35", fontsize=7, ha="center", va="center", clip_on=True,
                in_layout=False)  # a grid that does not reach a region hides its name
    ax.text(0.17, g_lo + 0.1, "unstable at init\n(Claim 7.1)", **grey)
    ax.text(1.0, g_lo + 0.1, "unstable in training\n(Claim 7.2)", **grey)
    ax.text(1.0, g_hi - 0.08, "trivial (Claim 7.2)", **grey)
    ax.set_xlim(a_lo, a_hi)
    ax.set_ylim(g_lo, g_hi)


def plot_tp6_map(ds: xr.Dataset, path) -> None:
    """The map: α across, γ up, a row per width and a column per optimizer; a
    marker per measured class (a red ring where it disagrees with paper 001's
    class), paper 001's boundaries as black lines (legend, right of the panels)."""
    got = classes(ds)
    alphas, gammas = ds["alpha"].values.tolist(), ds["gamma"].values.tolist()
    widths = ds["width"].values.tolist()
    fig, axes = figure(len(widths), len(_OPTIMIZERS), size=4.6, aspect=1.0)
    for (i, n), (j, o) in product(enumerate(widths), enumerate(_OPTIMIZERS)):
        ax = axes[i][j]
        _draw_claims(ax, alphas, gammas)
        for (m, oo, a, g), (cls, _) in got.items():
            if (m, oo) != (n, o):
                continue
            marker, color = _STYLE[cls]
            ax.scatter([a], [g], marker=marker, color=color, s=70, zorder=3)
            if cls not in ("undecided", tp6_class(a, g)):
                ax.scatter([a], [g], marker="o", s=260, facecolors="none",
                           edgecolors="red", lw=1.5, zorder=2)
        ax.set_xlabel(r"α (block multiplier $L^{-\alpha}$)")
        ax.set_ylabel(r"γ (hidden rate $\eta n^{-1} L^{-\gamma}$, Def. 6.2)")
        ax.set_title(f"{_OPTIMIZERS[o][0]}: networks n = {n}, "
                     f"L = {ds['depth'].values[0]}–{ds['depth'].values[-1]}, "
                     f"{ds.sizes['seed']} seeds", fontsize=9)
    _legend(axes[0][-1])
    save(fig, path)


def _legend(ax) -> None:
    """The classes' markers and paper 001's lines, right of ``ax``."""
    for k, (m, c) in _STYLE.items():
        ax.scatter([], [], marker=m, color=c, s=50, label=f"measured: {k}")
    ax.scatter([], [], marker="o", s=120, facecolors="none", edgecolors="red",
               label="measured class differs from TP VI's")
    ax.plot([], [], "k--", lw=1, label="TP VI: α = ½ (Claim 7.1:\nstable at init iff α ≥ ½)")
    ax.plot([], [], "k-", lw=1, label="TP VI: α + γ = 1 (Claim 7.2: stable\n"
            "iff α + γ ≥ 1, nontrivial iff ≤ 1)")
    ax.plot([], [], "k|", ms=12, label="TP VI: (1, 0) on the line: faithful iff\n"
            "α ≤ 1 (7.3), linearized iff α < 1 (7.6)")
    legend_outside(ax, fontsize=7, title="class by the rules of classify\n"
                   "(exponents over L, ±⅛ margin)", title_fontsize=7)
