"""Deep linear ResNets with U and v frozen, against exact references (issue 35):
paper 000's one-step kernel (eq. 7) and Tensor Programs VI's Figs. 8–9.

``nfd.linear_limit(parametrization=nfd.Parametrization(trainable=("W",)))`` is the
exact n → ∞ limit of a depth-L linear ResNet (eq. 1, φ = id) whose input and readout
weights are frozen, the setting of paper 000's main text and of paper 001 §3–4. Three panels:

(a) Paper 000, Fig. 7 / eq. 7: the feature kernel's change H_1(τ) − H_0(τ) after one
    SGD step on one sample, from ``linear_limit`` at L = 16…1024 and from
    ``train_resnet`` networks (n = 1024, L = 64, 16 seeds: mean ± 2 s.e.; the
    reference at their depth is ``linear_limit`` at L = 64), against
    the closed form of its appendix G.2.2 integrated with G₀ = e^{1−τ} (the solution
    of its own eq. 92) and against eq. 7 as printed.
(b) Paper 001, Fig. 8: at depth L = 64, the RMS of h_ℓ (ℓ = L/4, L/2, 3L/4, L) of the
    step's training input after 1, 5 and 10 SGD steps on ten-class digits (one-hot
    mse targets, batch 1), networks of widths 128…1024 (8 seeds: mean ± 2 s.e.)
    beside the limit (dashed).
(c) Paper 001, Fig. 9: the same RMS from ``linear_limit`` over depths L = 16…512.

Usage::

    python examples/linear_frozen.py [--out docs/linear_frozen.png] [--quick]

It prints the numbers docs/guide/depth.md quotes. About a minute on 2 cores (--quick: 5 s).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import nfd
from validation import load_digits, train_resnet

ETA_ONE = 0.5  # η_c of panel (a)
ETA_DIGITS = 0.1  # η_c of panels (b) and (c)
STEPS = (1, 5, 10)  # RMS after this many updates


def kernel_change_form(tau: np.ndarray, eta: float, corrected: bool) -> np.ndarray:
    """H_1(τ) − H_0(τ) after one step on (x, y = 1), |x|²/d = 1, coupled, T = 1:
    the appendix's ODE (eq. 96–98) with G₀ = e^{1−τ} (``corrected``), or eq. 7 as
    printed (tests/test_depth_parametrization.py derives both)."""
    if corrected:
        return 2 * eta**2 * np.exp(1 + tau) * (tau**3 / 3 + tau**2 / 2)
    e = np.exp(tau)
    return 2 * eta**2 * e * (tau**3 / 3 + tau**2 / 2
                             + (1 + np.exp(-1)) * (tau**2 * e - tau * e + e - 1))


def one_step(depths, width: int, seeds: int) -> dict:
    """Panel (a): the kernel change from linear_limit per depth and from networks."""
    X, y = np.array([[2.0, 0.0, 0.0, 0.0]] * 2), np.ones(2)
    out = {"limit": {}}
    for L in depths:
        ds = nfd.linear_limit(X, y, eta_c=ETA_ONE, depth=L,
                              parametrization=nfd.Parametrization(trainable=("W",)))
        out["limit"][L] = (ds.time.values, ds.h2.values[1] - ds.h2.values[0])
    net = train_resnet(X, y, width=width, depth=64, activation="identity", eta_c=ETA_ONE,
                       seeds=seeds, parametrization=nfd.Parametrization(trainable=("W",)), progress=False, dtype="float64")
    change = net.h2.values[:, 1] - net.h2.values[:, 0]  # (seed, time)
    out["network"] = (net.time.values, change.mean(0), change.std(0, ddof=1) / np.sqrt(seeds))
    return out


def digits(K: int) -> tuple[np.ndarray, np.ndarray]:
    """K ten-class digit images on the sphere, one-hot mse targets centred at 0."""
    X, labels = load_digits(classes=None, target="label", n_samples=K)
    return X, np.eye(10)[labels] - 0.1


def rms(h2: np.ndarray, L: int) -> np.ndarray:
    """RMS of h_ℓ at ℓ = L/4, L/2, 3L/4, L after each of :data:`STEPS` updates, from
    h2 (step, time) or (seed, step, time): (..., steps, 4)."""
    layers = [L // 4, L // 2, 3 * L // 4, L]
    return np.sqrt(h2[..., list(STEPS), :][..., layers])


def widths_and_depths(widths, depths, seeds: int) -> dict:
    """Panels (b) and (c): networks over width at L = 64 and the limit over depth."""
    K = max(STEPS) + 1
    X, y = digits(K)
    kw = dict(eta_c=ETA_DIGITS, parametrization=nfd.Parametrization(trainable=("W",)))
    out = {"limit": {}, "networks": {}}
    for L in sorted(set(depths) | {64}):
        out["limit"][L] = rms(nfd.linear_limit(X, y, depth=L, **kw).h2.values, L)
    for n in widths:
        ds = train_resnet(X, y, width=n, depth=64, activation="identity", seeds=seeds,
                          progress=False, **kw)
        r = rms(ds.h2.values, 64)
        out["networks"][n] = (r.mean(0), r.std(0, ddof=1) / np.sqrt(seeds))
    return out


def plot(a: dict, bc: dict, depths, path: Path) -> None:
    """The three panels (module docstring)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.4))
    for L, (t, change) in a["limit"].items():
        ax[0].plot(t, change, lw=1, label=f"linear_limit, L = {L}")
    t = np.linspace(0, 1, 201)
    ax[0].plot(t, kernel_change_form(t, ETA_ONE, True), "k--", lw=1.5,
               label="closed form, G₀ = exp(1 − τ)")
    ax[0].plot(t, kernel_change_form(t, ETA_ONE, False), "k:", lw=1.5,
               label="paper 000 eq. 7 as printed")
    tn, mean, se = a["network"]
    ax[0].errorbar(tn[::8], mean[::8], 2 * se[::8], fmt="o", ms=3, color="C3",
                   label="networks n = 1024, L = 64 (±2 s.e.)")
    ax[0].set(xlabel="depth time τ = ℓ/L", ylabel="H₁(τ) − H₀(τ)",
              title="(a) one step, one sample (paper 000, Fig. 7)")
    ax[0].legend(fontsize=7)
    widths = sorted(bc["networks"])
    lim64, j = bc["limit"][64], len(STEPS) - 1  # after the last of STEPS
    for i, name in enumerate(("L/4", "L/2", "3L/4", "L")):
        color = f"C{i}"
        mean = [bc["networks"][n][0][j, i] for n in widths]
        se = [bc["networks"][n][1][j, i] for n in widths]
        ax[1].errorbar(widths, mean, 2 * np.asarray(se), color=color, lw=1, marker="o",
                       ms=3, label=f"ℓ = {name}")
        ax[1].axhline(lim64[j, i], color=color, ls="--", lw=0.8)
        ax[2].plot(depths, [bc["limit"][L][j, i] for L in depths], color=color, marker="o",
                   ms=3, lw=1, label=f"ℓ = {name}")
    ax[1].set(xscale="log", xlabel="width n", ylabel=f"RMS of h_ℓ after {STEPS[j]} steps",
              title="(b) L = 64: networks (±2 s.e.), limit dashed (paper 001, Fig. 8)")
    ax[1].set_xticks(widths, [str(n) for n in widths])
    ax[1].minorticks_off()
    ax[2].set(xscale="log", xlabel="depth L", ylabel=f"RMS of h_ℓ after {STEPS[j]} steps, n → ∞",
              title="(c) the limit over depth (paper 001, Fig. 9)")
    ax[2].set_xticks(list(depths), [str(L) for L in depths])
    ax[2].minorticks_off()
    for k in (1, 2):
        ax[k].legend(fontsize=7)
    fig.suptitle("Deep linear ResNets with U and v frozen: nfd.linear_limit with only W trained "
                 "against networks and closed forms")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def summary(a: dict, bc: dict, depths) -> dict:
    """The numbers docs/guide/depth.md quotes."""
    t_big, change = a["limit"][max(a["limit"])]
    tn, mean, se = a["network"]
    # the networks' depth-64 reference; at τ = 0 (U frozen) both are exactly 0
    net_z = float(np.abs((mean - a["limit"][64][1])[1:] / se[1:]).max())
    deepest = bc["limit"][max(depths)]
    return {
        "eq7_limit_max_dev_corrected": float(np.abs(change - kernel_change_form(t_big, ETA_ONE, True)).max()),
        "eq7_limit_max_dev_printed": float(np.abs(change - kernel_change_form(t_big, ETA_ONE, False)).max()),
        "eq7_networks_max_z_against_L64_limit": net_z,
        "fig8_max_rel_dev_largest_width": float(np.abs(
            bc["networks"][max(bc["networks"])][0] / bc["limit"][64] - 1).max()),
        "fig9_max_rel_change_last_doubling": float(np.abs(
            bc["limit"][max(depths)] / bc["limit"][sorted(depths)[-2]] - 1).max()),
        "fig9_rms_deepest": deepest.round(4).tolist(),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/linear_frozen.png"))
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.quick:
        a = one_step((16, 64, 256), width=256, seeds=4)
        depths, widths, seeds = (16, 32, 64), (64, 128), 2
    else:
        a = one_step((16, 64, 256, 1024), width=1024, seeds=16)
        depths, widths, seeds = (16, 32, 64, 128, 256, 512), (128, 256, 512, 1024), 8
    bc = widths_and_depths(widths, depths, seeds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot(a, bc, depths, args.out)
    print(json.dumps(summary(a, bc, depths), indent=1))
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
