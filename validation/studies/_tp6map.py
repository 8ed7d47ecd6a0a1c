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

The n → ∞ limit (:func:`add_limit`, :func:`measure_limit_point`: ``nfd.simulate``
at α ∈ [½, 1], coupled backward, the same data, probes, η_c and depths) measures
x_init, u_init and df only (:data:`LIMIT_OBSERVABLES`), and
:func:`classify_limit` applies the rules it can; df's exponent is read only where
its Monte Carlo noise (the seeds' spread of the deterministic limit) is below
:data:`NOISE_SHARE` of its mean square at every depth.
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
           "classify", "beyond", "tp6_class", "measure_point", "CLASSES", "MARGIN",
           "measure_limit_point", "add_limit", "classify_limit", "LIMIT_OBSERVABLES",
           "NOT_TRIVIAL"]

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
#: What the limit measures (:func:`measure_limit_point`): x^ℓ and h^ℓ at init and Δf.
#: Not f at init (0 in the limit: v is independent of h_L), nor Δx^ℓ, Δh^ℓ and Def.
#: 7.7's remainder, which need each particle's probe path at two evaluations, coupled
#: as one neuron's (``simulate`` records no probe paths, and its probe sources are
#: conditioned on the history of each evaluation separately).
LIMIT_OBSERVABLES = ("x_init", "u_init", "df")
#: The limit's class where neither instability nor triviality is decided and Δh^ℓ,
#: which the feature-learning rules read, is not measured.
NOT_TRIVIAL = "not trivial (Δh not measured)"
_TASK = dict(kind="tanh", d=16, activation="gelu", T=1.0, probes=32)
_CONFIG = {
    True: dict(widths=[32], depths=[4, 8, 16], seeds=4, steps=2, batch=4,
               alphas=[0.5, 1.0], gammas=[0.0, 0.5]),
    False: dict(widths=[64, 128], depths=[8, 16, 32, 64, 128], seeds=8, steps=4, batch=8,
                alphas=[0.0, 0.25, 0.5, 0.75, 1.0, 1.25],
                gammas=[-0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0]),
}
#: The limit's part: α ∈ [½, 1] (where ``simulate`` has the block's limit), the
#: networks' γ and depths, coupled backward, float64; particles per optimizer (Adam's
#: dense states take 3·L·P² floats: 0.8 GB at L = 128, P = 512).
_LIMIT = {
    True: dict(alphas=[0.5, 1.0], seeds=2, particles={"sgd": 256, "adam": 256}),
    False: dict(alphas=[0.5, 0.75, 1.0], seeds=3, particles={"sgd": 2048, "adam": 512}),
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


def measure_limit_point(*, alpha: float, gamma: float, optimizer: str, depth: int,
                        particles: int, seeds: Sequence[int], steps: int, batch: int,
                        data_seed: int, activation: str = _TASK["activation"],
                        device=None) -> xr.Dataset:
    """The n → ∞ limit of :func:`measure_point`'s networks (``nfd.simulate``,
    coupled backward as the networks' backprop, float64, the same stream, probes and
    η_c), measured as far as it can be (:data:`LIMIT_OBSERVABLES`): ``x_init`` the
    largest over layers of √E[h_ℓ²] at step 0 (the batch's mean), ``u_init`` the same
    over ℓ < L (u_{ℓ+1} = W h_ℓ/√n at init has exactly h_ℓ's mean square in the
    limit), ``df`` the rms over probes of probe_f(K) − probe_f(0) (paired probe
    normals, ``nfd.Record``; its Monte Carlo error is about proportional to Δf, so it
    inflates the rms by a factor that hardly moves the exponent).

    Parameters
    ----------
    particles : int
        P.
    alpha, gamma, optimizer, depth, seeds, steps, batch, data_seed, activation, device
        As :func:`measure_point` (seeds: of the limit's draws).

    Returns
    -------
    xarray.Dataset
        :data:`LIMIT_OBSERVABLES` (seed,), NaN where a run diverged, and ``finite``.
    """
    d = _TASK["d"]
    X, y = synthetic_task(_TASK["kind"], steps * batch, d, seed=data_seed)
    Xp, yp = synthetic_task(_TASK["kind"], _TASK["probes"], d, seed=data_seed + 1,
                            teacher_seed=data_seed)
    opt = nfd.Adam() if optimizer == "adam" else nfd.SGD()
    values = np.full((len(LIMIT_OBSERVABLES), len(seeds)), np.nan)
    changes = np.full((len(seeds), _TASK["probes"]), np.nan)
    for i, s in enumerate(seeds):
        try:
            run = nfd.simulate(
                X, y, eta_c=_OPTIMIZERS[optimizer][1], depth=depth, batch_size=batch,
                optimizer=opt, activation=activation, backward="coupled",
                parametrization=nfd.Parametrization.tp6(alpha, gamma, trainable=("W",)),
                particles=particles, seed=s, dtype="float64", device=device,
                error_replicas=0, progress=False,
                record=nfd.Record(probes=(Xp, yp), probe_steps=[0, steps],
                                  paired_probes=True))
        except FloatingPointError:
            continue
        rms = np.sqrt(run["h2"].isel(step=0).values)
        changes[i] = run["probe_f"].values[-1] - run["probe_f"].values[0]
        values[:, i] = rms.max(), rms[:-1].max(), np.sqrt(np.mean(changes[i] ** 2))
    finite = np.isfinite(values).all(0)
    values[:, ~finite] = np.nan
    ds = xr.Dataset({k: ("seed", v) for k, v in zip(LIMIT_OBSERVABLES, values)})
    ds["finite"] = ("seed", finite.astype(np.int8))
    ds["df_noise"] = ((), _noise_share(changes))
    return ds.assign_coords(seed=list(seeds))


def _noise_share(changes: np.ndarray) -> float:
    """The Monte Carlo noise's share of the mean square of Δf (seeds, probes): the
    mean over probes of the seed variance over the mean over seeds and probes of
    Δf² (the limit is deterministic, so its seed spread is all noise). The noise
    inflates each seed's rms by 1/√(1 − share)."""
    if len(changes) < 2 or not np.isfinite(changes).all():
        return math.nan  # one seed has no spread
    return float(changes.var(0, ddof=1).mean() / np.mean(changes ** 2))


def add_limit(ds: xr.Dataset, *, store=None, scheduler: str | None = None,
              progress: bool = False, device=None) -> xr.Dataset:
    """Add the limit's measurements (:func:`measure_limit_point`) to the networks'
    study ``ds`` at its γ and depths, α ∈ [½, 1] (:data:`_LIMIT`), as
    ``limit_<observable>`` with dims (optimizer, limit_alpha, gamma, depth,
    limit_seed), and their fits (:func:`limit_fits`).

    Parameters
    ----------
    ds : xarray.Dataset
        :func:`run_tp6_map`'s networks (or the stored study).
    store, scheduler, progress, device
        See :func:`validation._sweep.run_jobs`.

    Returns
    -------
    xarray.Dataset
        ``ds`` with the limit's variables and attrs ``limit_particles_<optimizer>``.
    """
    quick = bool(int(ds.attrs.get("quick", 0)))
    cfg, seed = _LIMIT[quick], int(ds.attrs.get("seed", 0))
    seeds = [seed + s for s in range(cfg["seeds"])]
    axes = dict(optimizer=ds["optimizer"].values.tolist(), limit_alpha=cfg["alphas"],
                gamma=ds["gamma"].values.tolist(), depth=ds["depth"].values.tolist())
    jobs = [dict(alpha=a, gamma=g, optimizer=o, depth=L, particles=cfg["particles"][o],
                 seeds=seeds, steps=int(ds.attrs["steps"]), batch=int(ds.attrs["batch"]),
                 data_seed=seed, device=device)
            for o, a, g, L in product(*axes.values())]
    parts = run_jobs(measure_limit_point, jobs, study="tp6_map_limit", store=store,
                     scheduler=scheduler, progress=progress)
    flat = xr.concat([part.drop_attrs() for part in parts], "cell")
    shape = [len(v) for v in axes.values()] + [len(seeds)]
    out = ds.assign({f"limit_{k}": ((*axes, "limit_seed"), flat[k].values.reshape(shape))
                     for k in (*LIMIT_OBSERVABLES, "finite")})
    out["limit_df_noise"] = (tuple(axes), flat["df_noise"].values.reshape(shape[:-1]))
    out = out.assign_coords(limit_alpha=cfg["alphas"], limit_seed=seeds)
    out.attrs.update({f"limit_particles_{o}": cfg["particles"][o] for o in axes["optimizer"]},
                     limit_backward="coupled")
    limit_fits(out)
    return out


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
        depth, seed); attrs: every parameter and the fits (:func:`fits`); the
        limit's part of :func:`add_limit`.
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
    return add_limit(ds, store=store, scheduler=scheduler, progress=progress, device=dev)


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


def limit_points(ds: xr.Dataset) -> list[tuple[str, float, float]]:
    """Every (optimizer, α, γ) of the limit's part (none without it)."""
    if "limit_df" not in ds:
        return []
    return list(product(*(ds[k].values.tolist() for k in ("optimizer", "limit_alpha",
                                                          "gamma"))))


def limit_fits(ds: xr.Dataset) -> dict[tuple[str, float, float, str], PowerFit | None]:
    """:func:`fits` of the limit's :data:`LIMIT_OBSERVABLES` per (optimizer, α, γ)."""
    L = ds["depth"].values.astype(float)
    out = {}
    for (o, a, g), name in product(limit_points(ds), LIMIT_OBSERVABLES):
        v = ds[f"limit_{name}"].sel(optimizer=o, limit_alpha=a, gamma=g).transpose(
            "depth", "limit_seed").values
        if not np.isfinite(v).all():
            out[(o, a, g, name)] = None
            continue
        prefix = f"lim_{o}_a{a:g}_g{g:g}_{name}".replace("-", "m").replace(".", "p")
        out[(o, a, g, name)] = stored_fit(ds.attrs, prefix,
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
    return (_first_rule(exponents, rules, margin)
            or (CLASSES[5], "du = Θ(1), lin does not vanish"))


def _first_rule(exponents: dict[str, tuple[float, float]], rules: tuple,
                margin: float) -> tuple[str, str] | None:
    """The first of ``rules`` ((class, ((observable, "up" or "down"), ...)), in
    order) whose test an exponent's interval passes beyond ``margin``, with the tests
    it passed; "undecided" at the first rule an interval cannot decide; None when
    every rule is decided against."""
    for name, tests in rules:
        said = [(k, side, beyond(exponents[k], side, margin)) for k, side in tests]
        hits = [f"{k} {'grows' if side == 'up' else 'vanishes'}"
                for k, side, v in said if v == "yes"]
        if hits:
            return name, ", ".join(hits)
        open_ = [k for k, _, v in said if v == "undecided"]
        if open_:
            return "undecided", f"{', '.join(open_)} undecided (rule: {name})"
    return None


#: The largest share of Monte Carlo noise in the limit's mean square of Δf, at every
#: depth, for its exponent to count as a measurement: the rms is then inflated by at
#: most 1/√(1 − ¼) = 1.15, which moves the exponent over L = 8…128 by at most
#: log(1.15)/log(16) = 0.05, well inside :data:`MARGIN`.
NOISE_SHARE = 0.25

#: :func:`classify_limit`'s rules: :data:`RULES` on what the limit measures.
LIMIT_RULES = (
    ("unstable", (("x_init", "up"), ("df", "up"))),
    ("unfaithful", (("u_init", "up"), ("u_init", "down"))),
    ("trivial", (("df", "down"),)),
)


def classify_limit(exponents: dict[str, tuple[float, float]] | None,
                   margin: float = MARGIN) -> tuple[str, str]:
    """:func:`classify` on the limit's :data:`LIMIT_OBSERVABLES`: its rules 1–3 with
    the tests the limit can make (unstable if x_init or df grows, unfaithful if
    u_init grows or vanishes, trivial if df vanishes; a diverged run is unstable),
    and :data:`NOT_TRIVIAL` where none applies, since the feature-learning rules
    read Δh^ℓ, which the limit does not measure."""
    if exponents is None:
        return "unstable", "a run diverged"
    return (_first_rule(exponents, LIMIT_RULES, margin)
            or (NOT_TRIVIAL, "df = Θ(1); Δh not measured"))


def limit_classes(ds: xr.Dataset) -> dict[tuple[str, float, float], tuple[str, str]]:
    """:func:`classify_limit` of every (optimizer, α, γ) of the limit's part."""
    fit_of = limit_fits(ds)
    out = {}
    for point in limit_points(ds):
        fits_here = [fit_of[(*point, k)] for k in LIMIT_OBSERVABLES]
        if any(f is None for f in fits_here):
            out[point] = classify_limit(None)
            continue
        exps = {}
        for k, f in zip(LIMIT_OBSERVABLES, fits_here):
            _, lo, hi, ok = growth(f)
            exps[k] = (lo, hi) if ok else (math.nan, math.nan)
        if not noise_resolved(ds, point):
            exps["df"] = (math.nan, math.nan)
        out[point] = classify_limit(exps)
    return out


def noise_resolved(ds: xr.Dataset, point: tuple[str, float, float]) -> bool:
    """Whether the limit's Δf at ``point`` has a noise share below
    :data:`NOISE_SHARE` at every depth."""
    o, a, g = point
    share = ds["limit_df_noise"].sel(optimizer=o, limit_alpha=a, gamma=g).values
    return bool(np.all(share < NOISE_SHARE))


def limit_agrees(limit_class: str, network_class: str) -> str:
    """Whether the limit's class agrees with the networks': equal, or
    :data:`NOT_TRIVIAL` against a stable, faithful, nontrivial network class
    ("—" where either is undecided)."""
    if "undecided" in (limit_class, network_class):
        return "—"
    if limit_class == NOT_TRIVIAL:
        ok = network_class in ("no feature learning", CLASSES[4], CLASSES[5])
    else:
        ok = limit_class == network_class
    return "yes" if ok else "**no**"


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
    if limit_points(ds):
        lines += ["", _limit_table(ds, got, top)]
    return "\n".join(lines)


def _limit_table(ds: xr.Dataset, got: dict, top: int) -> str:
    """The limit's classes beside the networks' at n = ``top`` and paper 001's, with
    the limit's growth exponents."""
    fit_of, lim, net_fit = limit_fits(ds), limit_classes(ds), fits(ds)
    parts = ", ".join(f"{_OPTIMIZERS[o][0]} P = {int(ds.attrs[f'limit_particles_{o}'])}"
                      for o in ds["optimizer"].values.tolist())
    lines = [f"The n → ∞ limit (`nfd.simulate`, coupled backward, {parts}, "
             f"{ds.sizes['limit_seed']} seeds, the networks' depths, data and η_c) at "
             "α ∈ [½, 1], classified by `classify_limit`: the rules above on what the "
             "limit measures (x^ℓ and h^ℓ at init, Δf); f at init is 0 in the limit, "
             "and Δx^ℓ, Δh^ℓ and Def. 7.7's remainder are not measured (they need each "
             "particle's probe path at two evaluations, coupled as one neuron's), so "
             "feature learning and linearization are not decided there: such a point is "
             f"\"{NOT_TRIVIAL}\", which agrees with any stable, faithful, nontrivial "
             "class of the networks. The limit is deterministic, so its seeds' spread of "
             "Δf is Monte Carlo noise; where that noise is a quarter or more of the mean "
             "square of Δf at some depth, df's exponent is not read (undecided: \"df "
             "undecided\"), since the noise inflates the rms by a depth-dependent factor.",
             "",
             f"| optimizer | α | γ | limit | rule | networks, n = {top} | agrees | TP VI | "
             + " | ".join(f"limit e({k})" for k in LIMIT_OBSERVABLES)
             + f" | networks e(df), n = {top} | limit's noise share of Δf², largest over L |",
             "|" + "---|" * (9 + len(LIMIT_OBSERVABLES))]
    decided = agree = 0
    for o, a, g in limit_points(ds):
        cls, why = lim[(o, a, g)]
        net = got[(top, o, a, g)][0]
        verdict = limit_agrees(cls, net)
        decided += verdict != "—"
        agree += verdict == "yes"
        cells = [_OPTIMIZERS[o][0], f"{a:g}", f"{g:g}", cls, why, net, verdict,
                 tp6_class(a, g)]
        cells += [_exponent_text(fit_of[(o, a, g, k)]) for k in LIMIT_OBSERVABLES]
        cells.append(_exponent_text(net_fit[(top, o, a, g, "df")]))
        share = ds["limit_df_noise"].sel(optimizer=o, limit_alpha=a, gamma=g).values
        cells.append(f"{np.nanmax(share):.2f}" if np.isfinite(share).any() else "—")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(f"\nThe limit and the networks at n = {top} are both decided at {decided} "
                 f"of {len(lim)} points and agree at {agree} of them.")
    return "\n".join(lines)


_STYLE = {"unstable": ("X", "tab:red"), "unfaithful": ("D", "tab:purple"),
          "trivial": ("s", "0.55"), "no feature learning": ("v", "tab:brown"),
          CLASSES[4]: ("o", "tab:blue"), CLASSES[5]: ("P", "tab:green"),
          "undecided": ("$?$", "k"), NOT_TRIVIAL: ("h", "tab:cyan")}


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
    rows = len(widths) + bool(limit_points(ds))
    fig, axes = figure(rows, len(_OPTIMIZERS), size=4.6, aspect=1.0)
    for (i, n), (j, o) in product(enumerate(widths), enumerate(_OPTIMIZERS)):
        ax = axes[i][j]
        _draw_claims(ax, alphas, gammas)
        for (m, oo, a, g), (cls, _) in got.items():
            if (m, oo) != (n, o):
                continue
            _mark(ax, a, g, cls, cls not in ("undecided", tp6_class(a, g)))
        _label_axes(ax)
        ax.set_title(f"{_OPTIMIZERS[o][0]}: networks n = {n}, "
                     f"L = {ds['depth'].values[0]}–{ds['depth'].values[-1]}, "
                     f"{ds.sizes['seed']} seeds", fontsize=9)
    if limit_points(ds):
        _draw_limit(ds, axes[-1], alphas, gammas)
    _legend(axes[0][-1])
    save(fig, path)


def _mark(ax, a: float, g: float, cls: str, ring: bool) -> None:
    """The class ``cls`` of point (α, γ) = (a, g) on ``ax``, ringed in red if ``ring``."""
    marker, color = _STYLE[cls]
    ax.scatter([a], [g], marker=marker, color=color, s=70, zorder=3)
    if ring:
        ax.scatter([a], [g], marker="o", s=260, facecolors="none", edgecolors="red",
                   lw=1.5, zorder=2)


def _label_axes(ax) -> None:
    """The axes of a map panel: α and γ of Def. 6.2."""
    ax.set_xlabel(r"α (block multiplier $L^{-\alpha}$)")
    ax.set_ylabel(r"γ (hidden rate $\eta n^{-1} L^{-\gamma}$, Def. 6.2)")


def _draw_limit(ds: xr.Dataset, row, alphas: Sequence[float],
                gammas: Sequence[float]) -> None:
    """The limit's classes, a panel per optimizer in ``row`` (a red ring where it
    disagrees with the networks' class at the largest width)."""
    got, lim = classes(ds), limit_classes(ds)
    top = int(ds["width"].values[-1])
    for ax, o in zip(row, _OPTIMIZERS):
        _draw_claims(ax, alphas, gammas)
        if f"limit_particles_{o}" not in ds.attrs:
            ax.set_title(f"{_OPTIMIZERS[o][0]}: the limit was not run", fontsize=9)
            continue
        for (oo, a, g), (cls, _) in lim.items():
            if oo != o:
                continue
            _mark(ax, a, g, cls, limit_agrees(cls, got[(top, o, a, g)][0]) == "**no**")
        _label_axes(ax)
        ax.set_title(f"{_OPTIMIZERS[o][0]}: the limit n → ∞, P = "
                     f"{int(ds.attrs[f'limit_particles_{o}'])}, "
                     f"{ds.sizes['limit_seed']} seeds\n?: undecided or Δf's noise too large\n"
                     f"red ring: differs from the networks, n = {top}", fontsize=8)


def _legend(ax) -> None:
    """The classes' markers and paper 001's lines, right of ``ax``."""
    for k, (m, c) in _STYLE.items():
        ax.scatter([], [], marker=m, color=c, s=50, label=f"measured: {k}")
    ax.scatter([], [], marker="o", s=120, facecolors="none", edgecolors="red",
               label="networks: class differs from TP VI's;\n"
               "limit: class differs from the networks'")
    ax.plot([], [], "k--", lw=1, label="TP VI: α = ½ (Claim 7.1:\nstable at init iff α ≥ ½)")
    ax.plot([], [], "k-", lw=1, label="TP VI: α + γ = 1 (Claim 7.2: stable\n"
            "iff α + γ ≥ 1, nontrivial iff ≤ 1)")
    ax.plot([], [], "k|", ms=12, label="TP VI: (1, 0) on the line: faithful iff\n"
            "α ≤ 1 (7.3), linearized iff α < 1 (7.6)")
    legend_outside(ax, fontsize=7, title="class by the rules of classify\n"
                   "(exponents over L, ±⅛ margin)", title_fontsize=7)
