"""Study 6: post-activation against pre-activation ResNets at initialization (§3.1).

For m inputs x on the sphere of radius √d, relu networks of width n and depth L
are propagated once at initialization in both styles:

* post-activation (eq. 9):  h_0 = φ(Ux/√d),  h_ℓ = h_{ℓ−1} + √τ φ(W_ℓ h_{ℓ−1}/√n);
* pre-activation (eq. 1):   h_0 = Ux/√d,     h_ℓ = h_{ℓ−1} + √(τ/n) W_ℓ φ(h_{ℓ−1});

τ = T/L. Per network (seed) two numbers are kept: the mean coordinate
E[h_L] := (1/(m n)) Σ_x Σ_i h_{L,i}(x) and ‖h_L‖²/n averaged over the inputs.

References, per depth:

* Prop. 1's lower bound for post-act relu (c₁ = 1/√(2π), c₂ = 0):
  E[h_{L,i}] ≥ c₁(1 + c₁√(T/(Ln)))^L ‖x‖/√d.
* The n → ∞ mean-field recursion of post-act relu. Given h_{ℓ−1}, the proof of
  Prop. 1 uses E[h_{ℓ,i} | h_{ℓ−1}] = h_{ℓ−1,i} + √τ c₁‖h_{ℓ−1}‖/√n exactly; at
  n = ∞, ‖h‖/√n → √q with q = E[h²], and with m = E[h]
  m_ℓ = m_{ℓ−1} + √τ c₁√q_{ℓ−1},  q_ℓ = q_{ℓ−1} + 2√τ c₁ m_{ℓ−1}√q_{ℓ−1} + τ q_{ℓ−1}/2,
  from m_0 = c₁r, q_0 = r²/2, r = ‖x‖/√d. For large L, log m_L ≈ c₁√(TL): the
  growth does not depend on n, whereas the bound of Prop. 1 replaces √q by
  h_{ℓ−1,i}/√n and so grows only like exp(c₁√(TL/n)).
* Pre-act: E[h_{L,i}] = 0 exactly (W_ℓ → −W_ℓ symmetry) and, as n → ∞,
  ‖h_L‖²/n → C^{(L)}(x, x), the depth-L Euler recursion of the covariance ODE of
  Prop. 3 (:func:`nfd.nngp_kernel` with ``depth=L``), bounded by its L → ∞ limit.

Depth exponents: ``value = b·L^(−q)`` by :func:`validation._fit.fit_power_law`
(no plateau, log least squares, bootstrap over seeds); the growth exponent is −q.
E[h_L] of post-act relu grows faster than any power (like exp(c₁√(TL))), so its
exponent is an effective slope over the depths used, reported with its interval
only to say whether growth is resolved.
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
from ._plotting import figure, fit_label, fit_resolved, legend_outside, log_ticks, log_x_at, save
from ._report import Finding, exponent_finding, fit_finding, judge_exponent
from .._sweep import by_cell, run_jobs, seed_blocks, study_args
from ..data import sphere_stream

__all__ = ["run_postact", "summarize_postact", "plot_postact"]

_STYLES = ("pre", "post")
_C1 = 1.0 / math.sqrt(2.0 * math.pi)  # relu: E[φ(wx)] = |x|/√(2π) (c₁ of Prop. 1, c₂ = 0)
_CONFIG = {
    True: dict(widths=[64, 256], depths=[4, 8, 16, 32, 64, 128], seeds=8),
    False: dict(widths=[64, 256], depths=[4, 8, 16, 32, 64, 128, 256], seeds=32),
}
_TASK = dict(activation="relu", T=1.0, d=8, inputs=4)


def _job(*, style: str, width: int, depth: int, seeds: Sequence[int], input_seed: int,
         device=None) -> xr.Dataset:
    """Propagate the inputs through one ensemble at initialization.

    Returns
    -------
    xarray.Dataset
        ``mean_h`` (seed): mean of h_L over coordinates and inputs; ``h2`` (seed):
        ‖h_L‖²/n averaged over the inputs.
    """
    X = sphere_stream(_TASK["inputs"], _TASK["d"], seed=input_seed)
    net = ResNetEnsemble(_TASK["d"], width=width, depth=depth,
                         activation=_TASK["activation"], T=_TASK["T"], seeds=list(seeds),
                         style=style, device=device)
    with serial():  # one thread: no contention, the same bits on any count
        hL = net.propagate(X)["h"][:, -1].double()  # (S, m, n)
        mean_h, h2 = hL.mean((1, 2)).cpu().numpy(), hL.square().mean((1, 2)).cpu().numpy()
    return xr.Dataset(
        {"mean_h": ("seed", mean_h), "h2": ("seed", h2)},
        coords={"seed": np.asarray(seeds, dtype=np.int64)},
    )


def _mean_field(depths: Sequence[int], r: float, T: float) -> tuple[np.ndarray, np.ndarray]:
    """n → ∞ post-act relu recursion for E[h_L] and E[h_L²] (module docstring)."""
    m_out, q_out = [], []
    for L in depths:
        m, q = _C1 * r, r * r / 2.0
        s = math.sqrt(T / L)
        for _ in range(L):
            m, q = m + s * _C1 * math.sqrt(q), q + 2 * s * _C1 * m * math.sqrt(q) + s * s * q / 2
        m_out.append(m)
        q_out.append(q)
    return np.asarray(m_out), np.asarray(q_out)


def run_postact(*, quick: bool = False, store=None, scheduler: str | None = None,
                progress: bool = False, device=None, seed: int = 0) -> xr.Dataset:
    """Study 6: E[h_L] and ‖h_L‖²/n against depth, post- and pre-activation (Prop. 1).

    Parameters
    ----------
    quick : bool
        Widths 64 and 256, depths 4–128, 8 seeds (a few seconds on 2 CPU cores)
        instead of depths 4–256 and 32 seeds.
    store, scheduler, progress
        See :func:`validation._sweep.run_jobs`.
    device : str or torch.device, optional
        Torch device of the networks (default: CUDA when available).
    seed : int
        First network seed (seeds ``seed, seed+1, …``) and the seed of the inputs.

    Returns
    -------
    xarray.Dataset
        ``mean_h``, ``h2`` (style, width, depth, seed); references
        ``prop1_bound`` (width, depth), ``meanfield_mean_h``, ``meanfield_h2``
        (depth) for post-act and ``exact_h2`` (depth) for pre-act (see the module
        docstring). ``attrs``: every parameter and the fitted ``b·L^(−q)`` of
        ``{style}_{mean_h|h2}_n{width}`` (``mean_h`` for post-act only).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument.
    """
    quick, seed, dev = study_args(quick, seed, device)
    cfg = _CONFIG[quick]
    seeds = [seed + s for s in range(cfg["seeds"])]
    jobs = [dict(style=style, width=n, depth=L, seeds=block, input_seed=seed,
                 device=dev)
            for style in _STYLES for n in cfg["widths"] for L in cfg["depths"]
            for block in seed_blocks(seeds, 4 * L * n * n)]
    parts = run_jobs(_job, jobs, study="postact", store=store, scheduler=scheduler,
                     progress=progress)
    cells = by_cell(jobs, parts, ("style", "width", "depth"))
    ds = xr.combine_nested(
        [[[cells[(st, n, L)] for L in cfg["depths"]] for n in cfg["widths"]]
         for st in _STYLES],
        concat_dim=["style", "width", "depth"],
    ).assign_coords(style=list(_STYLES), width=cfg["widths"], depth=cfg["depths"])
    ds = ds.transpose("style", "width", "depth", "seed")

    T = _TASK["T"]
    X = sphere_stream(_TASK["inputs"], _TASK["d"], seed=seed)
    r = float(np.sqrt((X**2).sum(1) / _TASK["d"]).mean())  # ‖x‖/√d (= 1 on the sphere)
    L = np.asarray(cfg["depths"], float)
    n = np.asarray(cfg["widths"], float)[:, None]
    ds["prop1_bound"] = (("width", "depth"), _C1 * (1 + _C1 * np.sqrt(T / (L * n))) ** L * r)
    m_mf, q_mf = _mean_field(cfg["depths"], r, T)
    ds["meanfield_mean_h"] = ("depth", m_mf)
    ds["meanfield_h2"] = ("depth", q_mf)
    ds["exact_h2"] = ("depth", [
        float(np.diagonal(nfd.nngp_kernel(X, activation=_TASK["activation"], T=T, depth=int(d))
                          .kernel.isel(time=-1).values).mean()) for d in cfg["depths"]])
    ds.attrs = base_attrs(study="postact", quick=quick, seed=seed, c1=_C1, c2=0.0,
                          input_norm=r, **cfg, **_TASK)
    _fits(ds)
    return ds


def _fits(ds: xr.Dataset) -> dict[str, PowerFit]:
    """``value = b·L^(−q)`` for post-act E[h_L], ‖h_L‖²/n and pre-act ‖h_L‖²/n,
    per width; kept in ``ds.attrs`` (prefix ``{style}_{var}_n{width}``)."""
    L = ds["depth"].values.astype(float)
    out = {}
    for style, var in (("post", "mean_h"), ("post", "h2"), ("pre", "h2")):
        for n in ds["width"].values.tolist():
            v = ds[var].sel(style=style, width=n).transpose("depth", "seed").values
            key = f"{style}_{var}_n{n}"
            out[key] = stored_fit(ds.attrs, key,
                                  lambda v=v: fit_power_law(v, L=L, plateau=False))
    return out


def _growth(observable: str, fit: PowerFit, claim: str) -> Finding:
    """Growth exponent −q with its interval; growth is resolved when it excludes 0."""
    verdict = ("growth: the 95% interval excludes 0" if -fit.ci["q"][1] > 0
               else "no growth resolved: the 95% interval reaches 0")
    return fit_finding(observable, "depth growth exponent −q", fit, "q", claim, verdict,
                       scale=-1.0)


def _mean_ci(v: np.ndarray) -> tuple[float, tuple[float, float]]:
    """Mean of independent replicates and its normal 95% interval (1.96 s.e.)."""
    v = np.ravel(v)
    mean = float(v.mean())
    half = 1.96 * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, (mean - half, mean + half)


def summarize_postact(ds: xr.Dataset) -> list[Finding]:
    """Growth exponents of post-act E[h_L] and ‖h_L‖²/n, the ratio to Prop. 1's
    bound and to the n → ∞ recursion, pre-act ‖h_L‖²/n against the exact depth-L
    kernel and pre-act E[h_L] against 0."""
    fits = _fits(ds)
    L = ds["depth"].values.astype(float)
    out = []
    # exact n → ∞ log-log slope of pre-act ‖h_L‖²/n over the same depths (the same
    # log least-squares estimator as the fit, on exact values)
    exact_q = -fit_slope(L, ds["exact_h2"].values).slope
    for n in ds["width"].values.tolist():
        out.append(_growth(f"post-act E[h_L], relu, n = {n}", fits[f"post_mean_h_n{n}"],
                           "grows with L (Prop. 1)"))
        out.append(_growth(f"post-act ‖h_L‖²/n, relu, n = {n}", fits[f"post_h2_n{n}"],
                           "grows with L (Prop. 1)"))
        out.append(exponent_finding(
            f"pre-act ‖h_L‖²/n, relu, n = {n}", "depth exponent q", fits[f"pre_h2_n{n}"],
            "q", exact_q, f"bounded: q = {exact_q:.3g}, slope of the exact n → ∞ "
                          "value C^(L)(x, x) (Prop. 3)"))
        post = ds["mean_h"].sel(style="post", width=n)
        ratio = post / ds["prop1_bound"].sel(width=n)
        worst = int(np.argmin(ratio.mean("seed").values))
        est, ci = _mean_ci(ratio.isel(depth=worst).values)
        out.append(Finding(f"post-act E[h_L] / Prop. 1 bound, n = {n}",
                           f"min over depths (L = {int(L[worst])})", est, ci,
                           "≥ 1 (Prop. 1)",
                           "bound holds" if ci[1] >= 1 else "bound violated"))
        deepest = post.isel(depth=-1) / float(ds["meanfield_mean_h"].isel(depth=-1))
        est, ci = _mean_ci(deepest.values)
        out.append(Finding(f"post-act E[h_L] / n → ∞ recursion, n = {n}",
                           f"ratio at L = {int(L[-1])}", est, ci,
                           "→ 1 as n → ∞ (mean-field limit of Prop. 1's recursion)",
                           judge_exponent(est, ci, 1.0)))
        # one depth only: networks of one seed share U and W_1, W_2, … across depths
        est, ci = _mean_ci(ds["mean_h"].sel(style="pre", width=n).isel(depth=-1).values)
        out.append(Finding(f"pre-act E[h_L], n = {n}", f"seed mean at L = {int(L[-1])}",
                           est, ci, "0 (W → −W symmetry)", judge_exponent(est, ci, 0.0)))
    return out


def plot_postact(ds: xr.Dataset, path) -> None:
    """E[h_L] and ‖h_L‖²/n against depth (log-log): networks (seed means ± 2 s.e.)
    for both styles and widths, fitted lines, Prop. 1's bound, the n → ∞
    recursion and the exact pre-act kernel."""
    fits = _fits(ds)
    L = ds["depth"].values.astype(float)
    fig, axes = figure(1, 2, size=4.4, aspect=0.95)
    for ax, var in zip(axes[0], ("mean_h", "h2")):
        for i, n in enumerate(ds["width"].values.tolist()):
            for style, marker in (("post", "o"), ("pre", "s")):
                v = ds[var].sel(style=style, width=n)
                mean = v.mean("seed").values
                se = v.std("seed", ddof=1).values / np.sqrt(v.sizes["seed"])
                color = f"C{i + 2 * (style == 'pre')}"
                if var == "mean_h" and style == "pre":
                    # E[h_L] = 0 for pre-act: draw |mean| + 2 s.e., an upper bound
                    ax.plot(L, np.abs(mean) + 2 * se, marker, mfc="none", color=color,
                            label=f"pre, n={n}: |E[h_L]| + 2 s.e.")
                    continue
                fit = fits[f"{style}_{var}_n{n}"]
                ax.errorbar(L, mean, yerr=2 * se, fmt=marker, ms=4, color=color, capsize=2,
                            label=f"{style}, n={n} (±2 s.e. over seeds)\n"
                                  + fit_label(fit, width=44))
                if fit_resolved(fit):
                    ax.plot(L, fit.predict(L=L), "--", lw=1, color=color)
            if var == "mean_h":
                ax.plot(L, ds["prop1_bound"].sel(width=n).values, ":", color=f"C{i}",
                        label=f"Prop. 1 bound, n={n}")
        ref = "meanfield_mean_h" if var == "mean_h" else "meanfield_h2"
        ax.plot(L, ds[ref].values, "k-", lw=1, label="post, n → ∞ recursion")
        if var == "h2":
            ax.plot(L, ds["exact_h2"].values, "k:", lw=1, label="pre, exact C^(L)(x,x)")
        log_x_at(ax, L)
        log_ticks(ax, "y")
        ax.set_xlabel("depth L")
        what = "E[h_L] (mean coordinate)" if var == "mean_h" else "‖h_L‖²/n"
        ax.set_ylabel(what)
        ax.set_title(what, fontsize=9)
        legend_outside(ax, fontsize=6)
    save(fig, path)
