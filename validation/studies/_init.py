"""Study 1: strong error at initialization by synchronous coupling (Props. 2, 6).

For one input x, each coordinate i of a finite network (width n, depth L) is
coupled to the limiting SDEs by its own noise: with ξ_ℓ, ξ̃_ℓ the normalized
increments of :func:`validation.init_increments`,

    h_ℓ = h_{ℓ−1} + √τ σ_ℓ ξ_ℓ,          g_{ℓ−1} = g_ℓ + √τ σ̃_ℓ φ'(h_{ℓ−1}) ξ̃_ℓ,

the Brownian increment of layer ℓ is w(t_ℓ) − w(t_{ℓ−1}) = √τ ξ_{ℓ,i}, refined
to a grid of r = M/L substeps by a Brownian bridge (δw_j = √τ ξ/r + ε_j − ε̄,
ε_j iid N(0, T/M)), and the reference solves on that grid

    dh_t = σ_t dw_t,   h_0 = (Ux)_i/√d,      dg_t = φ'(h_t) σ̃_t dw̃_t,   g_T = v_i,

with the exact deterministic σ_t² = E[φ(h_t)²] and σ̃_t² = E[g_t²] of the
covariance ODEs (``nfd.exact_covariance``). Because σ_t and σ̃_t are deterministic, the
reference is two cumulative sums. The measured error is E|h_{ℓ,i} − h_{t_ℓ}|²
(mean over coordinates, one value per seed) and the same for g; the paper bounds
both by C(L⁻¹ + n⁻¹). The reference's own discretization error is measured by
recomputing it on the grid of M/2 steps with the same Brownian path.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np
import torch
import xarray as xr

import nfd
from sde import serial
from nfd.schema import base_attrs, check_positive_float, resolve_device_dtype

from .._fit import PowerFit, fit_power_law, stored_fit
from ._plotting import loglog_panels
from ._report import (Finding, exponent_finding, plateau_finding, reference_finding,
                      smallest_cell)
from .._sweep import by_cell, run_jobs, seed_blocks, study_args
from ..networks import init_increments
from ..data import sphere_stream

__all__ = ["run_init", "summarize_init", "plot_init"]

_QUARTERS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
_VERSION = 2  # of the job definition (1: coupled backward increments)
_CONFIG = {
    True: dict(activations=["tanh"], widths=[32, 64, 128, 256], depths=[4, 8, 16, 32],
               seeds=8, fine_steps=512),
    False: dict(activations=["tanh", "relu"], widths=[64, 128, 256, 512, 1024, 2048],
                depths=[4, 8, 16, 32, 64, 128], seeds=16, fine_steps=2048),
}


def _reference(h0, v, xi, xit, act, sig, sig_t, T: float, r: int, gen) -> tuple:
    """Fine-grid reference paths at the layer times, on the full and the half grid.

    Parameters
    ----------
    h0, v : Tensor (n,)
        The network's h_0 and g_L = v (exact samples of the SDEs' initial laws).
    xi, xit : Tensor (L, n)
        The network's normalized forward and backward increments.
    act : Activation
    sig, sig_t : Tensor (L·r + 1,)
        Exact σ_t = √E φ(h_t)² and σ̃_t = √E g_t² on the fine grid.
    T : float
    r : int
        Fine steps per layer (even).
    gen : torch.Generator
        Source of the Brownian-bridge innovations.

    Returns
    -------
    tuple of Tensor (L+1, n)
        h_ref, g_ref on the grid of L·r steps, then on the grid of L·r/2 steps
        driven by the same Brownian path.
    """
    L, n = xi.shape
    M = L * r
    delta = T / M
    tau = T / L

    def bridge(x):
        eps = torch.randn((L, r, n), generator=gen, dtype=x.dtype, device=x.device)
        eps = eps * math.sqrt(delta)
        return (math.sqrt(tau) * x / r)[:, None, :] + eps - eps.mean(1, keepdim=True)

    dw = bridge(xi).reshape(M, n)
    dwt = bridge(xit).reshape(M, n)
    out = []
    for k in (1, 2):  # full grid, then half grid (pairs of fine increments)
        dwk = dw.reshape(M // k, k, n).sum(1)
        dwtk = dwt.reshape(M // k, k, n).sum(1)
        s = sig[: M + 1 : k]
        st = sig_t[: M + 1 : k]
        H = torch.cat([h0[None], h0[None] + torch.cumsum(s[:-1, None] * dwk, 0)])
        # backward EM: g(s_j) = g(s_{j+1}) + φ'(h(s_j)) σ̃(s_{j+1}) δw̃_j, from g_T = v
        inc = act.dphi(H[:-1]) * st[1:, None] * dwtk
        tail = torch.flip(torch.cumsum(torch.flip(inc, [0]), 0), [0])
        G = torch.cat([v[None] + tail, v[None]])
        step = r // k
        out += [H[::step], G[::step]]
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _exact_sigmas(activation: str, T: float, M: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """σ_t = √E φ(h_t)² and σ̃_t = √E g_t² on the grid t_j = jT/M from the exact
    covariance ODEs (one input on the sphere, so C_0 = 1); shared by every job of
    a sweep, hence cached."""
    act = nfd.get_activation(activation)
    x = sphere_stream(1, d, seed=12345)
    _, C, Theta = nfd.exact_covariance(x, act, T, times=np.linspace(0.0, T, M + 1))
    c = C[:, 0, 0]
    return np.sqrt(act.pair_moments(c, c, c)[0]), np.sqrt(Theta[:, 0, 0])


def quarter_layers(L: int) -> np.ndarray:
    """Layer indices ℓ = 0, L/4, L/2, 3L/4, L of the times 0, T/4, T/2, 3T/4, T."""
    if L % 4:
        raise ValueError(f"depth must be a multiple of 4 to read quarter times, got {L}")
    return (_QUARTERS * L).astype(int)


def _job(*, activation: str, width: int, depth: int, seeds: Sequence[int], T: float,
         fine_steps: int, backward: str, version: int, d: int = 8,
         device=None) -> xr.Dataset:
    """Strong errors of one (activation, width, depth, block of seeds) cell.

    ``version`` only enters the job's key in the results store, so that results
    of an older definition of the job are not reused.
    """
    dev, _ = resolve_device_dtype(device, None)
    act = nfd.get_activation(activation)
    x = sphere_stream(1, d, seed=12345)[0]
    L = depth
    r = fine_steps // L
    if fine_steps % L or r % 2:
        raise ValueError(f"fine_steps = {fine_steps} must be an even multiple of "
                         f"depth = {L} (half-grid reference)")
    kw = dict(device=dev, dtype=torch.float64)
    sig, sig_t = (torch.as_tensor(a, **kw) for a in _exact_sigmas(activation, T, fine_steps, d))
    net = init_increments(x, width=width, depth=depth, activation=act, T=T,
                          seeds=list(seeds), backward=backward, device=dev,
                          dtype=torch.float32)
    layer_idx = quarter_layers(L)
    names = ("err_h", "err_g", "ref_err_h", "ref_err_g")
    res = {k: np.empty((len(seeds), len(_QUARTERS))) for k in names}
    gen = torch.Generator(device=dev)
    with serial():  # one thread: no contention, the same bits on any count
        for i, s in enumerate(seeds):
            gen.manual_seed(1_000_003 * int(s) + 7919 * L + width)
            take = lambda name: torch.as_tensor(net[name].values[i], **kw)  # noqa: E731
            H, G = take("h"), take("g")
            Hr, Gr, Hh, Gh = _reference(H[0], G[-1], take("xi"), take("xi_tilde"), act,
                                        sig, sig_t, T, r, gen)
            for key, a, b in (("err_h", H, Hr), ("err_g", G, Gr),
                              ("ref_err_h", Hh, Hr), ("ref_err_g", Gh, Gr)):
                res[key][i] = ((a - b) ** 2).mean(1)[layer_idx].cpu().numpy()
    return xr.Dataset(
        {k: (("seed", "time"), v) for k, v in res.items()},
        coords={"seed": np.asarray(seeds, dtype=np.int64), "time": _QUARTERS * T},
        attrs={"fine_steps": fine_steps},
    )


def run_init(*, quick: bool = False, store=None, scheduler: str | None = None,
             progress: bool = False, device=None, seed: int = 0, T: float = 1.0
             ) -> xr.Dataset:
    """Study 1: strong errors at initialization over a width × depth grid.

    Parameters
    ----------
    quick : bool
        Small grid (tanh; widths 32–256, depths 4–32, 8 seeds, M = 512; ~30 s
        on 2 CPU cores) instead of the full one (tanh and relu; widths 64–2048,
        depths 4–128, 16 seeds, M = 2048).
    store, scheduler, progress
        See :func:`validation.run_jobs`.
    device
        Torch device of the networks and references.
    seed : int
        First seed; seeds ``seed, seed+1, ...`` are used.
    T : float
        Time horizon.

    Returns
    -------
    xarray.Dataset
        ``err_h``, ``err_g``, ``ref_err_h``, ``ref_err_g`` with dims
        (activation, width, depth, seed, time), ``time`` = 0, T/4, T/2, 3T/4, T;
        the fitted rates of ``err_h`` at t = T and ``err_g`` at t = 0 in attrs
        (``{activation}_{h|g}_*``, see :meth:`PowerFit.to_attrs`).
    """
    quick, seed, dev = study_args(quick, seed, device)
    T = check_positive_float("T", T)
    cfg = _CONFIG[quick]
    jobs = []
    for act in cfg["activations"]:
        for n in cfg["widths"]:
            for L in cfg["depths"]:
                seeds = [seed + s for s in range(cfg["seeds"])]
                for block in seed_blocks(seeds, 4 * L * n * n):
                    jobs.append(dict(activation=act, width=n, depth=L, T=float(T),
                                     seeds=block, backward="decoupled", version=_VERSION,
                                     fine_steps=cfg["fine_steps"],
                                     device=dev))
    parts = run_jobs(_job, jobs, study="init", store=store, scheduler=scheduler,
                     progress=progress)
    cells = by_cell(jobs, parts, ("activation", "width", "depth"))
    grid = xr.combine_nested(
        [[[cells[(a, n, L)] for L in cfg["depths"]]
          for n in cfg["widths"]] for a in cfg["activations"]],
        concat_dim=["activation", "width", "depth"],
    ).assign_coords(activation=cfg["activations"], width=cfg["widths"],
                    depth=cfg["depths"]).transpose("activation", "width", "depth", ...)
    grid.attrs = base_attrs(study="init", quick=quick, T=float(T),
                            fine_steps=cfg["fine_steps"], seeds=cfg["seeds"], seed=seed)
    for act in cfg["activations"]:
        for which, tsel in (("h", T), ("g", 0.0)):
            _error_fit(grid, act, which, tsel)
    return grid


def _error_fit(ds: xr.Dataset, act: str, which: str, t: float) -> PowerFit:
    """err = a·n^-p + b·L^-q + c of one error at one time, kept in ``ds.attrs``."""
    err = ds[f"err_{which}"].sel(activation=act, time=t).stack(cell=("width", "depth"))
    v = err.transpose("cell", "seed").values
    return stored_fit(ds.attrs, f"{act}_{which}", lambda: fit_power_law(
        v, n=err["width"].values, L=err["depth"].values))


def summarize_init(ds: xr.Dataset) -> list[Finding]:
    """Fitted width and depth exponents of the strong errors, their plateau, and
    the reference's own discretization error relative to the smallest error."""
    out = []
    T = float(ds.attrs["T"])
    for act in ds["activation"].values.tolist():
        smooth = act != "relu"  # Prop. 6 assumes φ' Lipschitz
        for which, t, prop in (("h", T, "Prop. 2"), ("g", 0.0, "Prop. 6")):
            fit = _error_fit(ds, act, which, t)
            what = f"E|{which}_ℓ − {which}_t|² at t = {t:g}, {act}"
            scope = "" if smooth or which == "h" else "; relu is outside it (φ' not Lipschitz)"
            for q, name, sym in (("p", "width exponent p", "p"), ("q", "depth exponent q", "q")):
                out.append(exponent_finding(what, name, fit, q, 1.0,
                                            f"≤ C(1/L + 1/n) ({prop}{scope}): {sym} ≥ 1",
                                            bound=True))
            out.append(plateau_finding(what, fit, "no plateau (convergence)"))
            measured = ds[f"err_{which}"].sel(activation=act, time=t)
            ref = ds[f"ref_err_{which}"].sel(activation=act, time=t).mean("seed")
            per_seed = measured.stack(cell=("width", "depth")).transpose("cell", "seed")
            out.append(reference_finding(
                f"{what}: fine-grid reference error (vs half grid)", float(ref.max()),
                *smallest_cell(per_seed.values)))
    return out


def plot_init(ds: xr.Dataset, path) -> None:
    """Log-log strong errors against width (one line per depth) and against depth
    (one line per width), seed means with the fitted surface (no error bars: the
    uncertainty is the fit's bootstrap interval over seeds, printed in the legend)."""
    T = float(ds.attrs["T"])
    panels = []
    for act in ds["activation"].values.tolist():
        for which, t in (("h", T), ("g", 0.0)):
            fit = _error_fit(ds, act, which, t)
            mean = ds[f"err_{which}"].sel(activation=act, time=t).mean("seed")
            panels.append((f"E|{which} − ref|², {act}, t = {t:g}: seed means", mean, fit))
    loglog_panels(panels, path)
