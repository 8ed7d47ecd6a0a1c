"""Study 7: the kernel regime — finite-network NNGP kernels (Props. 3, 4 and 5).

For m inputs on the sphere of radius √d, pre-activation relu networks (eq. 1) of
width n and depth L are propagated once at initialization, and each network's
empirical kernel

    K_t(x, x') = ⟨h_ℓ(x), h_ℓ(x')⟩/n,    t = t_ℓ = ℓT/L ∈ {0, T/2, T},

is compared with the exact kernels of :func:`nfd.nngp_kernel` (``method="exact"``):
the continuous C_t of Prop. 3 (the joint limit) and the depth-L Euler recursion
C_t^{(L)} (the n → ∞ limit at depth L).

Errors (relative squared Frobenius norms at t = T, one value per network):

* joint:  e = ‖K_T − C_T‖²/‖C_T‖², fitted as e = a·n^(−p) + b·L^(−q) + c. Its
  mean over seeds is variance + bias²: the variance of a Gram matrix over n
  coordinates is O(1/n) (p = 1, the mean-square width rate of Prop. 2), and the
  bias is the weak Euler error ‖C^{(L)} − C_T‖ = O(1/L) of the covariance ODE, so
  q → 2; on the depths used the claimed q is the log-log slope of the exact
  ``exact_depth_sq_err`` = ‖C_T^{(L)} − C_T‖²/‖C_T‖².
* width only, per depth: e_L = ‖K_T − C_T^{(L)}‖²/‖C_T‖² = a_L·n^(−p) (p = 1; no
  plateau is fitted: C^{(L)} is the exact n → ∞ limit at depth L).

The additive joint model assumes the variance a/n does not depend on L. It does:
at T = 4 the kernel itself grows from C^{(2)} to C_T (diagonal 4 → e² = 7.4) and
with it its fluctuations, so a_L grows several-fold from L = 2 to 32 (see the
per-depth fits). The joint fit attributes that growth to the depth term, which
biases q low; the per-depth fits are the clean width measurement.

T = 4 so that the depth bias is resolvable above the width variance at the
widths used: the relative variance at L = 8 is about 10/n at T = 1, 2 and 4 alike,
while the relative bias² at L = 4 is 0.001, 0.015 and 0.135.

Strict positive definiteness (Prop. 4: C_t is SPD for t > 0 when φ is Lipschitz,
nonlinear and non-polynomial, as relu is): the smallest eigenvalue of C_t at
t = T/2 and T on the m inputs, exactly and for the seed-averaged network kernel K̄_t
of the widest, deepest networks, with the delta-method standard error below. A
finite set of inputs can only confirm Prop. 4 on those inputs.

RKHS containment (Prop. 5, via Theorem 3 of the appendix): H_t ⊆ H_{t'}
contractively iff C_{t'} − C_t is a kernel, i.e. positive semidefinite on every
finite set of inputs. Reported for the pairs (0, T/2), (T/2, T), (0, T): the
smallest eigenvalue of C_{t'} − C_t exactly (continuous and depth-L; the Euler
increments τE[φφ] are PSD, so containment holds at every depth), and of the
seed-averaged network kernels K̄_{t'} − K̄_t with a delta-method standard error
(λ_min has gradient uuᵀ, u its eigenvector, so se = sd_seed(uᵀ(K_{t'} − K_t)u)/√S).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import xarray as xr

import nfd
from nfd.schema import base_attrs
from sde import fit_slope, serial

from .._fit import PowerFit, fit_power_law, stored_fit
from ..networks import ResNetEnsemble
from ._plotting import figure, fit_label, legend_outside, log_ticks, log_x_at, save
from ._report import Finding, exponent_finding, fit_finding, plateau_finding
from .._sweep import by_cell, run_jobs, seed_blocks, study_args
from ..data import sphere_stream

__all__ = ["run_kernel", "summarize_kernel", "plot_kernel"]

_HALVES = np.array([0.0, 0.5, 1.0])  # t / T at which kernels are kept
_PAIRS = ((0, 1), (1, 2), (0, 2))  # indices into _HALVES: (t, t') with t < t'
_CONFIG = {
    True: dict(widths=[128, 256, 512, 1024], depths=[2, 4, 8, 16], seeds=8),
    False: dict(widths=[128, 256, 512, 1024, 2048], depths=[2, 4, 8, 16, 32], seeds=16),
}
_TASK = dict(activation="relu", T=4.0, d=8, inputs=6)


def _job(*, width: int, depth: int, seeds: Sequence[int], input_seed: int,
         device=None) -> xr.Dataset:
    """Empirical kernels ⟨h_ℓ(x), h_ℓ(x')⟩/n of one ensemble at ℓ = 0, L/2, L.

    Returns
    -------
    xarray.Dataset
        ``kernel`` (seed, time, input, input2), float64.
    """
    X = sphere_stream(_TASK["inputs"], _TASK["d"], seed=input_seed)
    net = ResNetEnsemble(_TASK["d"], width=width, depth=depth,
                         activation=_TASK["activation"], T=_TASK["T"], seeds=list(seeds),
                         regime="kernel", device=device)
    with serial():  # one thread: no contention, the same bits on any count
        h = net.propagate(X)["h"][:, np.rint(_HALVES * depth).astype(int)].double()
        K = (h @ h.mT / width).cpu().numpy()  # (S, 3, m, m)
    return xr.Dataset(
        {"kernel": (("seed", "time", "input", "input2"), K)},
        coords={"seed": np.asarray(seeds, dtype=np.int64), "time": _HALVES * _TASK["T"]},
    )


def run_kernel(*, quick: bool = False, store=None, scheduler: str | None = None,
               progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 7: network NNGP kernels against ``nfd.nngp_kernel``; RKHS containment.

    Parameters
    ----------
    quick : bool
        Widths 128–1024, depths 2–16, 8 seeds instead of widths 128–2048,
        depths 2–32, 16 seeds.
    store, scheduler, progress
        See :func:`validation._sweep.run_jobs`.
    device : str or torch.device, optional
        Torch device of the networks (default: CUDA when available).
    seed : int
        First network seed (seeds ``seed, seed+1, …``) and the seed of the inputs.

    Returns
    -------
    xarray.Dataset
        ``kernel`` (width, depth, seed, time, input, input2); exact references
        ``exact_kernel`` (time, input, input2) and ``exact_kernel_depth`` (depth,
        time, input, input2); errors ``sq_err``, ``sq_err_depth`` (width, depth,
        seed) and ``exact_depth_sq_err`` (depth); RKHS increments
        ``rkhs_min_eig`` and its ``rkhs_min_eig_se`` (width, depth, pair),
        ``rkhs_min_eig_exact`` (pair) and ``rkhs_min_eig_exact_depth`` (depth,
        pair), with ``t_from``, ``t_to`` (pair). ``attrs``: every parameter and
        the fits (prefixes ``joint`` and ``width_L{depth}``).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    seeds = [seed + s for s in range(cfg["seeds"])]
    jobs = [dict(width=n, depth=L, seeds=block, input_seed=seed,
                 device=dev)
            for n in cfg["widths"] for L in cfg["depths"]
            for block in seed_blocks(seeds, 4 * L * n * n)]
    parts = run_jobs(_job, jobs, study="kernel", store=store, scheduler=scheduler,
                     progress=progress)
    cells = by_cell(jobs, parts)
    ds = xr.combine_nested(
        [[cells[(n, L)] for L in cfg["depths"]] for n in cfg["widths"]],
        concat_dim=["width", "depth"],
    ).assign_coords(width=cfg["widths"], depth=cfg["depths"])
    ds = ds.transpose("width", "depth", "seed", "time", "input", "input2")

    T = _TASK["T"]
    X = sphere_stream(_TASK["inputs"], _TASK["d"], seed=seed)
    act = _TASK["activation"]
    ds["exact_kernel"] = (("time", "input", "input2"),
                          nfd.nngp_kernel(X, activation=act, T=T, times=_HALVES * T)
                          .kernel.values)
    ds["exact_kernel_depth"] = (("depth", "time", "input", "input2"), np.stack([
        nfd.nngp_kernel(X, activation=act, T=T, depth=L).kernel.values[
            np.rint(_HALVES * L).astype(int)] for L in cfg["depths"]]))
    CT = ds["exact_kernel"].isel(time=-1)
    norm2 = float((CT**2).sum())
    KT = ds["kernel"].isel(time=-1)
    dims = ("input", "input2")
    ds["sq_err"] = ((KT - CT) ** 2).sum(dims) / norm2
    ds["sq_err_depth"] = ((KT - ds["exact_kernel_depth"].isel(time=-1)) ** 2).sum(dims) / norm2
    ds["exact_depth_sq_err"] = ((ds["exact_kernel_depth"].isel(time=-1) - CT) ** 2
                                ).sum(dims) / norm2
    _add_rkhs(ds)
    ds.attrs = base_attrs(study="kernel", quick=quick, seed=seed, style="pre",
                          block="one-layer", regime="kernel", method="exact", **cfg, **_TASK)
    _fits(ds)
    return ds


def _add_rkhs(ds: xr.Dataset) -> None:
    """Smallest eigenvalues of the kernel increments C_{t'} − C_t (module docstring)."""
    t = ds["time"].values
    ds.coords["t_from"] = ("pair", [t[i] for i, _ in _PAIRS])
    ds.coords["t_to"] = ("pair", [t[j] for _, j in _PAIRS])

    def increments(K: np.ndarray) -> np.ndarray:  # (..., time, m, m) → (..., pair, m, m)
        return np.stack([K[..., j, :, :] - K[..., i, :, :] for i, j in _PAIRS], axis=-3)

    ds["rkhs_min_eig_exact"] = ("pair", np.linalg.eigvalsh(
        increments(ds["exact_kernel"].values))[..., 0])
    ds["rkhs_min_eig_exact_depth"] = (("depth", "pair"), np.linalg.eigvalsh(
        increments(ds["exact_kernel_depth"].values))[..., 0])
    D = increments(ds["kernel"].values)  # (width, depth, seed, pair, m, m)
    lam, se = _seed_mean_min_eig(np.moveaxis(D, 2, -3))
    ds["rkhs_min_eig"] = (("width", "depth", "pair"), lam)
    ds["rkhs_min_eig_se"] = (("width", "depth", "pair"), se)


def _seed_mean_min_eig(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest eigenvalue of the seed mean of symmetric matrices and its
    delta-method standard error.

    Parameters
    ----------
    K : ndarray (..., seed, m, m)
        One matrix per seed.

    Returns
    -------
    lam, se : ndarray (...)
        λ_min of K̄ = mean over seeds, and sd_seed(uᵀK u)/√S with u the eigenvector
        of λ_min (the gradient of λ_min at K̄ is uuᵀ).
    """
    lam, U = np.linalg.eigh(K.mean(axis=-3))
    u = U[..., 0]  # eigenvector of the smallest eigenvalue, (..., m)
    proj = np.einsum("...i,...sij,...j->...s", u, K, u)
    return lam[..., 0], proj.std(axis=-1, ddof=1) / math.sqrt(K.shape[-3])


def _fits(ds: xr.Dataset) -> dict[str, PowerFit]:
    """Joint fit of ``sq_err`` and a width fit of ``sq_err_depth`` at every depth;
    kept in ``ds.attrs`` (prefixes ``joint``, ``width_L{depth}``)."""
    st = ds["sq_err"].stack(cell=("width", "depth")).transpose("cell", "seed")
    out = {"joint": stored_fit(ds.attrs, "joint", lambda: fit_power_law(
        st.values, n=st["width"].values, L=st["depth"].values))}
    n = ds["width"].values
    for L in ds["depth"].values.tolist():
        v = ds["sq_err_depth"].sel(depth=L).transpose("width", "seed").values
        out[f"width_L{L}"] = stored_fit(ds.attrs, f"width_L{L}", lambda v=v: fit_power_law(
            v, n=n, plateau=False))
    return out


def summarize_kernel(ds: xr.Dataset) -> list[Finding]:
    """Width and depth exponents of the kernel error, the exact depth exponent of
    the Euler bias, the smallest eigenvalues of the kernels (Prop. 4) and of their
    increments (Prop. 5), exact and from the widest, deepest networks."""
    fits = _fits(ds)
    L = ds["depth"].values.astype(float)
    out = []
    # the depth term of the joint fit is the squared Euler bias ‖C^(L) − C_T‖²,
    # computed exactly; its log-log slope over the same depths (the same log
    # least-squares estimator) is the claimed q
    exact = ds["exact_depth_sq_err"].values
    q_exact = -fit_slope(L, exact).slope
    q_local = -math.log(exact[-1] / exact[-2]) / math.log(L[-1] / L[-2])
    out.append(Finding("‖C_T^(L) − C_T‖²/‖C_T‖² (exact, no network)",
                       "depth exponent q (log-log slope over the depths)", q_exact,
                       (q_exact, q_exact),
                       "q → 2 as L → ∞ (derived: Euler weak order 1 for Prop. 3's ODE)",
                       f"exact; local slope {q_local:.3g} at L = {int(L[-2])}–{int(L[-1])}"))
    what = "‖K_T − C_T‖²/‖C_T‖² (network vs exact joint limit), relu"
    out.append(exponent_finding(what, "width exponent p", fits["joint"], "p", 1.0,
                                "p = 1: O(1/n) mean-square width error (derived; "
                                "Prop. 2's rate for h)"))
    out.append(exponent_finding(what, "depth exponent q", fits["joint"], "q", q_exact,
                                f"q = {q_exact:.3g}: the exact squared Euler bias of "
                                "Prop. 3's ODE on these depths"))
    out.append(plateau_finding(what, fits["joint"], "none (convergence, Prop. 3)"))
    what = "‖K_T − C_T^(L)‖²/‖C_T‖² = a_L·n^-p (network vs exact depth-L)"
    for depth in ds["depth"].values.tolist():
        out.append(exponent_finding(f"{what}, L = {depth}", "width exponent p",
                                    fits[f"width_L{depth}"], "p", 1.0,
                                    "p = 1: O(1/n) (derived; Prop. 2's rate at fixed depth)"))
    shallow, deepest = int(L[0]), int(L[-1])
    lo_s, hi_s = fits[f"width_L{shallow}"].ci["a"]
    for depth in (shallow, deepest):
        fit = fits[f"width_L{depth}"]
        lo, hi = fit.ci["a"]
        out.append(fit_finding(f"{what}, L = {depth}", "variance constant a_L", fit, "a",
                               "a independent of L (the additive joint model)",
                               "reference depth" if depth == shallow else
                               f"depends on L: disjoint from the L = {shallow} interval"
                               if lo > hi_s or hi < lo_s else
                               f"consistent with L = {shallow}"))
    n_max = int(ds["width"][-1])
    out += _spd_findings(ds)
    for k in range(ds.sizes["pair"]):
        t0, t1 = float(ds["t_from"][k]), float(ds["t_to"][k])
        lam_exact = float(ds["rkhs_min_eig_exact"][k])
        out.append(Finding(f"λ_min(C_{t1:g} − C_{t0:g}) (exact, joint limit)", "value",
                           lam_exact, (lam_exact, lam_exact), "≥ 0 (Prop. 5)",
                           "PSD" if lam_exact >= 0 else "NOT PSD"))
        lam = float(ds["rkhs_min_eig"].isel(width=-1, depth=-1, pair=k))
        half = 1.96 * float(ds["rkhs_min_eig_se"].isel(width=-1, depth=-1, pair=k))
        ci = (lam - half, lam + half)
        out.append(Finding(f"λ_min(K̄_{t1:g} − K̄_{t0:g}), networks n = {n_max}, "
                           f"L = {deepest}", "seed mean (delta-method 95%)", lam, ci,
                           f"≥ 0 (Prop. 5); exact depth-L value "
                           f"{float(ds['rkhs_min_eig_exact_depth'].isel(depth=-1, pair=k)):.3g}",
                           "PSD: the interval is above 0" if ci[0] > 0 else
                           "NOT PSD: the interval is below 0" if ci[1] < 0 else
                           "PSD not resolved: the interval contains 0"))
    return out


def _spd_findings(ds: xr.Dataset) -> list[Finding]:
    """Prop. 4 on the study's inputs: λ_min(C_t) > 0 at every kept t > 0, exactly
    (joint limit and depth-L recursion) and for the networks' seed-mean kernel at the
    widest width and the deepest depth, with a delta-method 95% interval."""
    out = []
    n_max, deepest = int(ds["width"][-1]), int(ds["depth"][-1])
    m = ds.sizes["input"]
    K = ds["kernel"].isel(width=-1, depth=-1).transpose("time", "seed", "input", "input2")
    lam_net, se_net = _seed_mean_min_eig(K.values)
    lam_exact = np.linalg.eigvalsh(ds["exact_kernel"].transpose("time", ...).values)[:, 0]
    lam_depth = np.linalg.eigvalsh(ds["exact_kernel_depth"].isel(depth=-1)
                                   .transpose("time", ...).values)[:, 0]
    for i, t in enumerate(ds["time"].values.tolist()):
        if t <= 0:
            continue  # Prop. 4 is for t > 0 (C_0 = ⟨x, x'⟩/d is the inputs' Gram matrix)
        claim = f"> 0: C_t strictly positive definite for t > 0 (Prop. 4), on these {m} inputs"
        out.append(Finding(f"λ_min(C_{t:g}) (exact, joint limit)", "value",
                           float(lam_exact[i]), (float(lam_exact[i]),) * 2, claim,
                           "SPD" if lam_exact[i] > 0 else "NOT SPD"))
        half = 1.96 * float(se_net[i])
        ci = (float(lam_net[i]) - half, float(lam_net[i]) + half)
        out.append(Finding(f"λ_min(K̄_{t:g}), networks n = {n_max}, L = {deepest}",
                           "seed mean (delta-method 95%)", float(lam_net[i]), ci,
                           f"{claim}; exact depth-L value {float(lam_depth[i]):.3g}",
                           "SPD: the interval is above 0" if ci[0] > 0 else
                           "SPD not resolved: the interval reaches 0"))
    return out


def plot_kernel(ds: xr.Dataset, path) -> None:
    """Kernel errors against width and depth (log-log, fitted lines), network
    against exact kernel entries, and the smallest eigenvalues of the increments."""
    fits = _fits(ds)
    fig, axes = figure(2, 2, size=4.6, aspect=0.8)
    n = ds["width"].values.astype(float)
    L = ds["depth"].values.astype(float)
    mean = ds["sq_err"].mean("seed")
    ax = axes[0, 0]
    for j, d in enumerate(L):
        ax.plot(n, mean.isel(depth=j), "o", ms=4, color=f"C{j}", label=f"L = {int(d)}")
        ax.plot(n, fits["joint"].predict(n=n, L=d), "--", lw=1, color=f"C{j}")
    deep = ds["sq_err_depth"].isel(depth=-1).mean("seed")
    ax.plot(n, deep, "k^", ms=4, label=f"vs C^(L), L = {int(L[-1])}")
    ax.plot(n, fits[f"width_L{int(L[-1])}"].predict(n=n), "k:", lw=1)
    ax.set_xlabel("width n")
    ax.set_ylabel("‖K_T − C_T‖²/‖C_T‖² (seed mean)", fontsize=8)
    ax.set_title("kernel error against width (dashed: joint fit)", fontsize=9)
    ax = axes[0, 1]
    for i, w in enumerate(n):
        ax.plot(L, mean.isel(width=i), "o", ms=4, color=f"C{i}", label=f"n = {int(w)}")
        ax.plot(L, fits["joint"].predict(n=w, L=L), "--", lw=1, color=f"C{i}")
    ax.plot(L, ds["exact_depth_sq_err"], "k-", lw=1, label="exact ‖C^(L) − C_T‖²")
    ax.set_xlabel("depth L")
    ax.set_ylabel("‖K_T − C_T‖²/‖C_T‖² (seed mean)", fontsize=8)
    ax.set_title("kernel error against depth (dashed: joint fit)", fontsize=9)
    for ax, x in ((axes[0, 0], n), (axes[0, 1], L)):
        ax.plot([], [], "--", color="0.3", lw=1, label=fit_label(fits["joint"], width=30))
        log_x_at(ax, x)
        log_ticks(ax, "y")
        legend_outside(ax, fontsize=6.5)
    ax = axes[1, 0]
    kbar = ds["kernel"].isel(width=-1, time=-1).mean("seed")
    ref = ds["exact_kernel_depth"].isel(time=-1)
    for j, d in enumerate(L):
        ax.plot(ref.isel(depth=j).values.ravel(), kbar.isel(depth=j).values.ravel(), "o",
                ms=3, color=f"C{j}", label=f"L = {int(d)}")
    lims = [float(ref.min()), float(ref.max())]
    ax.plot(lims, lims, "k-", lw=0.8)
    ax.set_xlabel("exact C_T^(L)(x, x')")
    ax.set_ylabel("seed mean of K_T(x, x')")
    ax.set_title(f"kernel entries, n = {int(n[-1])}", fontsize=9)
    legend_outside(ax, fontsize=6.5)
    ax = axes[1, 1]
    x = np.arange(ds.sizes["pair"])
    labels = [f"({float(a):g}, {float(b):g})" for a, b in zip(ds["t_from"], ds["t_to"])]
    ax.plot(x, ds["rkhs_min_eig_exact"], "ks", label="exact C_t (joint limit)")
    ax.plot(x, ds["rkhs_min_eig_exact_depth"].isel(depth=-1), "k+",
            label=f"exact C^(L), L = {int(L[-1])}")
    ax.errorbar(x + 0.1, ds["rkhs_min_eig"].isel(width=-1, depth=-1),
                yerr=1.96 * ds["rkhs_min_eig_se"].isel(width=-1, depth=-1), fmt="o",
                color="C3", label=f"networks n = {int(n[-1])}, L = {int(L[-1])}\n"
                                  "(±1.96 s.e.)")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(x, labels)
    ax.set_xlabel("(t, t')")
    ax.set_ylabel("λ_min(C_t' − C_t)")
    ax.set_title("λ_min(C_t' − C_t) (Prop. 5: ≥ 0)", fontsize=9)
    legend_outside(ax, fontsize=6.5)
    save(fig, path)
