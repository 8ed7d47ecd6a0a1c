"""Tensor Programs VI's block (paper 001 §6.3): finite networks approach its n → ∞ limit.

Networks of widths 32…512 (256 seeds each; ``validation.train_resnet`` with
``parametrization=nfd.Parametrization(block="post-nonlin-ms")``) against ``nfd.simulate``
with the same parametrization (relu, P = 2^18) and against the exact oracle
``nfd.linear_limit`` with it (φ = id), in both backward
modes: the bias of the networks' mean output, the root mean square over the 15 trained
steps of (seed mean − limit) with the seed-mean and limit variances subtracted, with
a 95% bootstrap interval over seeds, against the n^{−1} of a finite network's mean.
Setting of tests/test_tp6_limit.py (L = 4, d = 8, 16 online steps with ±1 targets;
η_c = 0.3 for relu, 0.1 for φ = id). About two minutes on 2 cores.

Usage::

    python examples/tp6_limit_width.py [--out docs/guide/tp6_limit_width.png]

It prints the numbers docs/guide/tp6_limit.md quotes.
"""

from __future__ import annotations

import argparse

import numpy as np

import nfd
import validation

WIDTHS = (32, 64, 128, 256, 512)
SEEDS, K, D, L = 256, 16, 8, 4
ETA = {"relu": 0.3, "identity": 0.1}


def stream() -> tuple[np.ndarray, np.ndarray]:
    """K inputs on the sphere of radius √d and their ±1 targets sign(x₀)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((K, D))
    X *= np.sqrt(D) / np.linalg.norm(X, axis=1, keepdims=True)
    return X, np.sign(X[:, 0])


def limit(X, y, activation: str, backward: str) -> tuple[np.ndarray, np.ndarray]:
    """The limit's f on the trained steps and its variance (0 for the oracle)."""
    kw = dict(eta_c=ETA[activation], depth=L,
              parametrization=nfd.Parametrization(block="post-nonlin-ms"), backward=backward)
    if activation == "identity":
        f = nfd.linear_limit(X, y, **kw).f.values[1:, 0]
        return f, np.zeros_like(f)
    ds = nfd.simulate(X, y, activation=activation, particles=2**18, seed=11,
                      progress=False, **kw)
    return ds.f.values[1:, 0], ds.f_se.values[1:, 0] ** 2


def bias(f: np.ndarray, ref: np.ndarray, ref_var: np.ndarray) -> float:
    """Root mean square of (seed mean of f (S, m) − ref) less the variances, ≥ 0."""
    dev = f.mean(0) - ref
    noise = f.var(0, ddof=1) / len(f) + ref_var
    return float(np.sqrt(max(np.mean(dev ** 2 - noise), 0.0)))


def measure(X, y, activation: str, backward: str, rng) -> dict:
    """Bias and its 95% bootstrap interval (resampled seeds) per width."""
    ref, ref_var = limit(X, y, activation, backward)
    out = {}
    for n in WIDTHS:
        f = validation.train_resnet(X, y, width=n, depth=L, eta_c=ETA[activation],
                                    activation=activation, seeds=SEEDS, backward=backward,
                                    parametrization=nfd.Parametrization(block="post-nonlin-ms"), progress=False).f.values[:, 1:, 0]
        boot = [bias(f[rng.integers(0, SEEDS, SEEDS)], ref, ref_var) for _ in range(400)]
        out[n] = (bias(f, ref, ref_var), *np.percentile(boot, [2.5, 97.5]))
    return out


def plot(results: dict, path: str) -> None:
    """Bias against width, log-log, with the n^{−1} guide; a width whose bias is not
    resolved (bootstrap interval reaching 0) is drawn as its upper bound (open ▽)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    n = np.array(WIDTHS, float)
    for (activation, backward), res in results.items():
        vals = np.array([res[w] for w in WIDTHS])  # (widths, 3): bias, lo, hi
        ok = vals[:, 1] > 0
        x = n * (1.04 if backward == "decoupled" else 0.96)
        ref = "simulate, P = 2^18" if activation == "relu" else "exact linear_limit"
        line = ax.errorbar(x[ok], vals[ok, 0],
                           yerr=[vals[ok, 0] - vals[ok, 1], vals[ok, 2] - vals[ok, 0]],
                           marker="o" if activation == "relu" else "s", capsize=3,
                           ls="-" if backward == "coupled" else "--",
                           label=f"{activation}, {backward} (limit: {ref})")
        if (~ok).any():
            ax.plot(x[~ok], vals[~ok, 2], "v", mfc="none", color=line[0].get_color())
    ax.plot(n, 0.09 * 32 / n, color="gray", lw=1, label="∝ 1/n")
    ax.set(xscale="log", yscale="log", xlabel="width n", ylim=(2e-3, 0.2),
           ylabel="bias of the networks' mean f (rms over steps)",
           title="Tensor Programs VI's block: networks against the limit")
    ax.set_xticks(WIDTHS, [str(w) for w in WIDTHS])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7, title_fontsize=7,
              title="bars: 95% bootstrap over 256 seeds; ▽: unresolved, upper bound")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/guide/tp6_limit_width.png")
    args = parser.parse_args(argv)
    X, y = stream()
    rng = np.random.default_rng(1)
    results = {(a, b): measure(X, y, a, b, rng)
               for a in ("relu", "identity") for b in ("coupled", "decoupled")}
    for (a, b), res in results.items():
        cells = ", ".join(f"n={w}: {v[0]:.4f} [{v[1]:.4f}, {v[2]:.4f}]" for w, v in res.items())
        q = np.log(res[32][0] / res[128][0]) / np.log(4)
        print(f"{a} {b}: {cells}; slope 32→128 {q:.2f}")
    plot(results, args.out)
    return results


if __name__ == "__main__":
    main()
