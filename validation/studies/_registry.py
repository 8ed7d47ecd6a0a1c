"""The validation studies and the driver behind ``nfd-validate`` (``python -m validation``).

Each :class:`Study` bundles a ``run`` function (→ xarray.Dataset, jobs kept in a
resumable :class:`validation.ResultsStore`), ``summarize`` (→ findings computed
from the Dataset) and ``plot`` (→ PNG). :func:`run_validation` runs a selection,
writes one netCDF and one PNG per study and REPORT.md.
"""

from __future__ import annotations

import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
import xarray as xr

from nfd.plot import pyplot
from nfd.schema import PAPER, netcdf_engine, package_version

from .._sweep import ResultsStore
from ._report import Finding, format_report
from ._assumption1 import plot_assumption1, run_assumption1, summarize_assumption1
from ._collapse import conclude_collapse, plot_collapse, run_collapse, summarize_collapse
from ._depth import plot_depth, run_depth, summarize_depth
from ._gia import conclude_gia, plot_gia, run_gia, summarize_gia
from ._init import plot_init, run_init, summarize_init
from ._kernel import plot_kernel, run_kernel, summarize_kernel
from ._postact import plot_postact, run_postact, summarize_postact
from ._tp6map import conclude_tp6_map, plot_tp6_map, run_tp6_map, summarize_tp6_map
from ._training import plot_training, run_training, summarize_training
from .transfer import (conclude_adam_transfer, conclude_baselines, conclude_branch_transfer,
                       conclude_transfer, plot_adam_transfer, plot_baselines,
                       plot_branch_transfer, plot_transfer, run_adam_transfer,
                       plot_tp6, run_baselines, run_branch_transfer, run_tp6,
                       run_transfer, summarize_adam_transfer, summarize_baselines,
                       summarize_branch_transfer, summarize_tp6, summarize_transfer,
                       conclude_tp6)

__all__ = ["Study", "STUDIES", "run_validation", "write_report"]


@dataclass(frozen=True)
class Study:
    """One validation study.

    Attributes
    ----------
    name : str
        CLI name.
    number : int
        Number in the issue / report.
    title : str
    description : str
        What is measured and the paper's claim (a paragraph of the report).
    run : callable
        ``run(*, quick, store, scheduler, progress, device) -> xarray.Dataset``.
    summarize : callable
        ``summarize(ds) -> list[Finding]``.
    plot : callable
        ``plot(ds, path) -> None``.
    conclude : callable, optional
        ``conclude(ds) -> str``: the study's answer in numbers, printed under the
        description.
    """

    name: str
    number: int
    title: str
    description: str
    run: Callable[..., xr.Dataset]
    summarize: Callable[[xr.Dataset], list[Finding]]
    plot: Callable[[xr.Dataset, Path], None]
    conclude: Callable[[xr.Dataset], str] | None = None


#: The validation studies by CLI name, in the order of their numbers: what
#: :func:`validation.run_validation` runs and :func:`validation.write_report` reports.
STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("init", 1, "Initialization: strong error by synchronous coupling (Props. 2, 6)",
          "Finite networks driven against fine-grid forward/backward SDEs with their own "
          "normalized increments (Brownian-bridge refined); E|h_{ℓ,i} − h_{t_ℓ}|² at t = T "
          "and E|g_{ℓ,i} − g_{t_ℓ}|² at t = 0, fitted as a·n^-p + b·L^-q + c. "
          "Paper 002 bounds both by C(1/L + 1/n).",
          run_init, summarize_init, plot_init),
    Study("training", 2, "Training: networks against the limit of their backward mode "
          "(Theorem 1, Fig. 3)",
          "Networks trained by online SGD over a width × depth grid in both backward modes, "
          "each against the limit of its own mode: coupled (ordinary backprop) against "
          "nfd.simulate(backward=\"coupled\") (response terms of paper 000, Bordelon et al. "
          "ICLR 2024), decoupled (independent backward copy) against "
          "nfd.simulate(backward=\"decoupled\") (Definition 1 of paper 002); "
          "simulate(depth=L) gives the pure width error, the Richardson-extrapolated "
          "simulate(depth=L_ref) the joint error; f_lim is the limit of the network's own "
          "mode. Expected: width exponent 1 and no plateau at every depth in both modes "
          "(the variance of f is O(1/n)). Paper 002 reports O(1/L + 1/n) for networks "
          "trained by ordinary SGD against its NFD (Thm. 1, Fig. 3: CIFAR-10, SGD at "
          "batch 128), and its Cor. 1 gives the decoupled networks the same limit; "
          "the coupled rows here are against paper 000's limit instead, which study 3 "
          "finds to differ from the NFD at L → ∞, so they do not test Fig. 3's claim.",
          run_training, summarize_training, plot_training),
    Study("gia", 3, "The GIA question: do ordinary and decoupled backprop share a limit?",
          "The gap f_coupled − f_decoupled of the two limits, simulate(backward=\"coupled\") "
          "− simulate(backward=\"decoupled\"), paired on the same u, v and Brownian path, "
          "for L up to 512 and extrapolated to L → ∞ (plateau c of c + b·L^-q fitted to "
          "its mean square over SGD steps); beside it the same gap of finite networks, "
          "paired on the same forward weights and data: paper 002's pre-activation "
          "block (eq. 1), online SGD at batch 1 on study 2's synthetic stream, 12 steps. "
          "Paper 002 (Cor. 1) says the gap vanishes as L → ∞, and its Figs. 4c and 7c "
          "(CIFAR-10, widths 128 and 256, SGD at batch 128) show standard and decoupled "
          "loss curves aligning with depth; paper 000 keeps forward–backward response "
          "terms in the limit.",
          run_gia, summarize_gia, plot_gia, conclude_gia),
    Study("assumption1", 4, "Assumption 1: smallest eigenvalues of Σ and Θ along training",
          "λ_min of the covariance matrices Σ_t⁽ᵏ⁾ and Θ_t⁽ᵏ⁾ of Definition 1 at chosen SGD "
          "steps k, from the limit (nfd.simulate(backward=\"decoupled\"), float64) and "
          "from decoupled networks across widths: depth L = 4, tanh, online SGD (batch 1, "
          "η_c = 0.1) on the synthetic tanh teacher (d = 16). Paper 002 assumes them "
          "bounded away from 0 (Assumption 1) and shows them positive for CIFAR-10 "
          "networks of widths 512–4096 (Fig. 6, online SGD at lr 0.1, 4 hidden layers). "
          "Σ_t⁽ᵏ⁾, the feature kernel on the k + 1 inputs seen, is also the check along "
          "training of Prop. 4's positive definiteness (at initialization: study 7).",
          run_assumption1, summarize_assumption1, plot_assumption1),
    Study("collapse", 5, "Two-layer blocks: internal learning collapse (§5, eq. 7–8)",
          "Internal update ‖x − x̃‖/√n (eq. 27) and residual update (eq. 33–34) against depth "
          "under the depth-μP and the depth-aware first-layer learning rate, for networks "
          "trained by ordinary backprop and beside them their n → ∞ limit, "
          "nfd.simulate(parametrization=nfd.Parametrization(block=\"two-layer\"), "
          "backward=\"coupled\", record=nfd.Record(collapse=True)), "
          "on the same stream at depths up to twice the networks' largest; each fitted as "
          "b·L^(−q) with a bootstrap over its own seeds. Paper 002 "
          "predicts the internal update ∝ L^(−1/2) under depth-μP and ≈ L^0 with eq. 8.",
          run_collapse, summarize_collapse, plot_collapse, conclude_collapse),
    Study("postact", 6, "Post- vs pre-activation at initialization (Prop. 1)",
          "E[h_L] and ‖h_L‖²/n against depth for relu networks at initialization (widths "
          "64 and 256, T = 1, 4 inputs on the sphere, d = 8), post-activation (eq. 9) vs "
          "pre-activation (eq. 1), beside Prop. 1's lower bound and the n → ∞ mean-field "
          "recursion of post-act relu. Prop. 1 bounds post-act E[h_{L,i}] from below by "
          "c₁(1 + c₁√(T/(Ln)))^L‖x‖/√d (relu: c₁ = 1/√(2π)), so that the features may "
          "diverge with depth (Fig. 1a); pre-act features stay bounded (their n → ∞ "
          "value is the depth-L covariance recursion of Prop. 3).",
          run_postact, summarize_postact, plot_postact),
    Study("kernel", 7, "Kernel regime: NNGP kernels, strict positive definiteness and "
          "RKHS containment (Props. 3, 4, 5)",
          "Finite-network kernels h_L·h_L'/n of pre-activation relu networks (eq. 1) at "
          "initialization against nfd.nngp_kernel, over widths and depths; the smallest "
          "eigenvalue of C_t at t = T/2, T on the inputs (Prop. 4: > 0 for t > 0) and of "
          "C_t' − C_t for t < t' (Prop. 5: ≥ 0), exact and from the networks' seed-mean "
          "kernels with a delta-method interval.",
          run_kernel, summarize_kernel, plot_kernel),
    Study("depth", 8, "Depth convergence of the limits: weak-error exponent q (shared noise)",
          "nfd.simulate(backward=mode, depth=L) for both modes and L up to 512, every L on "
          "the same Brownian path per seed (fine innovations coarsened with "
          "nfd.coarsen_innovations, u, v from the same seed): the paired differences "
          "f_L − f_2L ∝ L^-q give the weak-error exponent of E f_L − E f_∞ without f_∞. "
          "Euler–Maruyama has weak order 1 for smooth coefficients.",
          run_depth, summarize_depth, plot_depth),
    Study("transfer", 9, "Learning-rate transfer across depth on real data: networks "
          "beside the limits (eq. 1, eq. 6/8, Figs. 2, 5)",
          "Online SGD (batch 1, mse, relu) on scikit-learn's digits 3 vs 8 (|x|² = d) and "
          "on the synthetic tanh teacher. One-layer blocks (eq. 1) with ordinary backprop "
          "over depths × two widths × a log-spaced η_c grid up to divergence × seeds; "
          "beside them both limits, nfd.simulate(backward=\"coupled\" | \"decoupled\"), "
          "on the same η_c grid at several L with a few seeds each (the same seeds at "
          "every grid point), extrapolated to L = ∞ by a fit a + b/L per η_c and seed. "
          "Digits are standardised with the training images' statistics only. "
          "Observables: the running-mean train loss (online loss of the last K/4 "
          "steps) and the probe loss after K steps. The optimal η_c is the vertex of the "
          "parabola through the grid minimum and its neighbours in log η_c, with a 95% "
          "studentised bootstrap interval over seeds (t with S − 1 degrees of freedom; the "
          "networks' seeds, or the limit's own). Two-layer blocks (eq. 6) under depth-μP and the "
          "depth-aware η₁ = η_c n√L (eq. 8): the spread and drift of the optimum across "
          "depths (paper 002, Fig. 5). The horizon T at one η_c: networks at one depth "
          "beside the coupled limit (Fig. 2). Momentum and weight decay (torch.optim.SGD "
          "semantics), digits, one width, beside the coupled limit: β over {0, 1/2, 3/4, "
          "7/8, 15/16} at η_c = 0.01, so that the effective rate η_c/(1 − β) runs from 0.01 "
          "to 0.16 across the plain optimum η* ≈ 0.04 (the optimum in log(1 − β)); λ over "
          "u/(η_c K), u = 10⁻²…1 in steps of √10, and λ = 0, at the plain optimum "
          "η_c = 0.04 (the optimum in log λ, λ = 0 counting as below the grid; where the "
          "loss only rises, the threshold λ₁₀ at which it first exceeds λ = 0's by 10%). "
          "Papers 000/001 derive depth-μP so that the optimum transfers across depth "
          "(paper 000, Fig. 4 and B.8: also momentum and weight decay).",
          run_transfer, summarize_transfer, plot_transfer, conclude_transfer),
    Study("adam", 10, "Adam's learning rate across depth: depth-μP against the block "
          "multiplier only (Tensor Programs VI, Def. 6.1, Fig. 10)",
          "Ten-class digits (softmax cross-entropy, relu, batch B, K steps at a constant "
          "η_c, betas (0.9, 0.999), ε = 1e-8 in the rescaled units of nfd.schema.AdamRun): "
          "depth-μP ResNets (eq. 1) trained by exactly torch.optim.Adam in two rules for "
          "the hidden rate, depth-μP (every W_ℓ at lr η_c·√(T/(Ln)), TP VI's η/√L) and "
          "the block multiplier only (W_ℓ at lr η_c·√(T/n), (α, γ) = (½, 0)); U and V at "
          "lr η_c under both. Networks at two widths over depths × a log-spaced η_c grid "
          "× seeds, beside their n → ∞ limit at each depth, nfd.simulate(optimizer="
          "nfd.Adam(), depth=L, parametrization=nfd.Parametrization(hidden_lr=rule)) "
          "with dense P×P Adam states, a few seeds "
          "of its own (the same at every grid point). Observables: the running-mean "
          "train loss (online loss of the last K/4 steps) and the test loss after K "
          "steps. The optimal η_c is the vertex of the parabola through the grid "
          "minimum and its neighbours in log η_c, with a 95% studentised bootstrap "
          "interval over seeds; its drift is the least-squares slope of log₂ η* against "
          "log₂ L. TP VI claims that η* transfers across depth under depth-μP and "
          "shifts under the block multiplier only.",
          run_adam_transfer, summarize_adam_transfer, plot_adam_transfer,
          conclude_adam_transfer),
    Study("branch", 11, "The branch exponent across depth: depth-μP (α = ½) against "
          "CompleteP (α = 1), with μP without depth scaling and the standard "
          "parametrization as the controls",
          "Ten-class digits (softmax cross-entropy, relu, batch B, K SGD steps at a "
          "constant η_c, ordinary backprop): ResNets with branch (T/L)^α W_ℓ φ/√n "
          "(branch_exponent = α), U and v at lr η_c·n and every W_ℓ at η_c·n·(T/L)^{1−2α}, "
          "so that each layer's update is Θ(T/L) under both α (nfd._model._depth). Networks at "
          "two widths over depths × a log-spaced η_c grid × seeds, beside their n → ∞ "
          "limit at each depth, nfd.simulate(parametrization=nfd.Parametrization(branch_exponent=α), depth=L), a few seeds of "
          "its own (the same at every grid point); the controls, networks at the larger "
          "width on grids of their own: the μP ResNet without depth scaling (branch "
          "√(T/n), constant rate, lower η_c) and the standard parametrization (weights "
          "N(0, 1/fan-in), f = vᵀh_L, one torch lr η for every weight); and Adam at both "
          "exponents, networks and limit on study 10's grid and settings (U and V at lr "
          "η_c, W at η_c·(T/L)^(1−α)/√n, depth-independent for α = 1). Observables: the running-mean train loss (last K/4 "
          "steps) and the test loss after K steps; optimal η_c and its drift per "
          "doubling of L as in study 10; the lowest loss against depth; the feature "
          "diversity exponent κ = 1 − s/2, s the slope of log E|h_{t+ε} − h_t|² against "
          "log ε over ε = 1/16…1/2 from the limit's particle paths at init and after "
          "training (TP VI Def. 7.6). Claims: both exponents transfer η* (paper 000 "
          "App. M; TP VI Fig. 11 says α = 1 with Adam shifts η*), the controls do not "
          "(paper 000 Figs. 1, B.2; TP VI Fig. 10), and "
          "depth-μP alone keeps κ = ½ after training while α = 1's tends to 0 with L "
          "(TP VI Claims 7.4–7.5, Figs. 17–18).",
          run_branch_transfer, summarize_branch_transfer, plot_branch_transfer,
          conclude_branch_transfer),
    Study("baselines", 12, "The baselines that should not transfer, on study 9's grid: "
          "μP without depth scaling and the standard parametrization beside depth-μP",
          "Study 9's networks (eq. 1, relu, mse, online SGD at batch 1 on digits 3 vs 8, "
          "its stream, depths, seeds and η_c grid; one width) under three "
          "parametrizations, each on a log-spaced grid of its own rate: depth-μP (branch "
          "√(T/(Ln)), every weight at lr η_c·n, f = vᵀh_L/n), μP without depth scaling "
          "(branch √(T/n), the same rates) and the standard parametrization (weights "
          "N(0, 1/fan-in), branch multiplier 1, f = vᵀh_L, one torch lr η for every "
          "weight). Observables as in study 9; the optimal rate per depth (the vertex of "
          "the parabola through the grid's minimum and its neighbours in log η, with a "
          "95% studentised bootstrap interval over seeds), its drift per doubling of L "
          "over the depths with an interior optimum, each control's drift against "
          "depth-μP's on the same seeds, and the lowest loss against depth. Claims: "
          "depth-μP transfers (papers 000, 001); the baselines do not (paper 000 Figs. "
          "1, B.2, SGD; TP VI §10.2, Fig. 10 bottom, Adam).",
          run_baselines, summarize_baselines, plot_baselines, conclude_baselines),
    Study("tp6", 13, "Tensor Programs VI's experiments on its own block: the hidden "
          "rate and the block multiplier across depth, |x| against relu and "
          "pre-LayerNorm (post-nonlinearity with mean subtraction, Figs. 3, 10–13, 19)",
          "Ten-class digits (study 10's stream: softmax cross-entropy, relu, batch B, K "
          "Adam steps at a constant rate, betas (0.9, 0.999), ε = 1e-8) on paper 001's "
          "§6.3 block x^l = x^{l−1} + a·(T/L)^α·MS(φ(W^l x^{l−1})) at T = 1, U and V "
          "frozen (trainable=(\"W\",): TP VI's \"input/output layers fixed\"), W "
          "trained by exactly torch.optim.Adam at lr η_c·(T/L)^γ/√n (Def. 6.2, "
          "nfd.Parametrization.tp6(α, γ)). Fig. 10/11 protocol: the hidden rate η_c "
          "swept at each depth under depth-μP (α, γ) = (½, ½), the block multiplier "
          "only (½, 0), the ODE limit (1, 0) and SP (0, 1); Fig. 13: the block "
          "multiplier a swept under depth-μP at one η_c. Networks at two widths × "
          "seeds, beside their n → ∞ limit at each depth, nfd.simulate(optimizer="
          "nfd.Adam(), depth=L, parametrization=nfd.Parametrization.tp6(α, γ, "
          "trainable=(\"W\",))), dense P×P Adam states, P = 16·K·B, float64, a few "
          "seeds of its own (the same at every grid point); SP has no limit (the limit "
          "takes α ∈ [½, 1]). The grid is log-spaced in steps of √2, each rule run on "
          "a window of it around its optimum at each depth (placed from probe runs; "
          "a minimum at a window's end is not resolved). T = 8 (TP VI's base depth) "
          "would be T = 1 at the multiplier 8^α·a and the rate 8^γ·η_c: it moves η* "
          "and a* by depth-independent factors and leaves the drifts, up to the shift "
          "in a, which the a sweep measures. Observables: the running-mean train loss "
          "(last K/4 steps) and the test loss after K steps; the optimum and its "
          "drift per doubling of L as in study 10. With U and V frozen, the block "
          "multiplier only at η_c is depth-μP at η_c·√(L/T): the same network, so its "
          "drift is depth-μP's minus ½ exactly, and Fig. 10's top and middle panels "
          "are one claim. Figs. 3 and 12 (version 2): η_c swept under depth-μP with "
          "|x| for relu, and with |x| and pre-LayerNorm (LayerNorm on x^{l−1} before "
          "W^l, nfd.Parametrization.tp6(½, ½, layernorm=True)), networks and limit on "
          "windows of their own; their lowest loss over η_c is set beside relu's, "
          "paired over the same seeds. Fig. 19: the feature diversity exponent κ "
          "(Def. 7.6) of relu and |x| in the limit under depth-μP at one η_c, from "
          "the particle paths of the residual stream x^l (nfd.Record(paths=...)), "
          "D(ε) = E|x_{t+ε} − x_t|² ∝ ε^{2(1−κ)} fitted over ε = 1/16…1/2 as in "
          "study 11, at initialization and after K − 1 steps, paired over the limit's "
          "seeds. Under this protocol the block multiplier only with preLN is again "
          "depth-μP at a √L-rescaled rate, so only depth-μP's drift is run. TP VI "
          "claims: depth-μP's η* and a* transfer, the others' η* shift ((1, 0) "
          "upwards), depth-μP's loss falls with depth and SP's degrades; |x| trains "
          "better than relu at depth (Fig. 3, §8.3) and has more feature diversity, "
          "κ(|x|) > κ(relu) (§8.3, Fig. 19); with preLN depth-μP keeps η* and its "
          "loss improves with depth (Fig. 12).",
          run_tp6, summarize_tp6, plot_tp6, conclude_tp6),
    Study("tp6_map", 14, "Tensor Programs VI's (α, γ) map, measured: stable, trivial, "
          "unfaithful, feature-learning and layerwise-linearized points (Def. 6.2, "
          "Claims 7.1–7.3, 7.6)",
          "Paper 001's block (§6.3, post-nonlinearity with Mean Subtraction, "
          "block=\"post-nonlin-ms\", T = 1, gelu) with branch L^−α and the hidden "
          "layers at paper 001's rate η n⁻¹ L^−γ (Def. 6.2, δ = α), U and V frozen "
          "(Figs. 10–12's protocol: under μP a trained U or V moves the features and "
          "the output by Θ(1) at every (α, γ)), trained by exactly torch.optim.SGD "
          "(η_c = 0.5) or Adam (η_c = 0.02) for K steps of B samples on the synthetic "
          "tanh teacher, float64, over a grid of α and γ and depths L. On held-out "
          "probes, at init and after training, the root mean square (max over layers) "
          "of x^ℓ, f and h^ℓ = W^ℓx^{ℓ−1} at init, of Δx^ℓ, Δf and Δh^ℓ after "
          "training, and L × Def. 7.7's remainder of the layers' linearization. Each "
          "quantity's growth exponent e (∝ L^e) is fitted over depths with a 95% "
          "bootstrap interval over seeds, and the point is classified by the rules of "
          "validation.studies._tp6map.classify (an exponent grows or vanishes when its "
          "interval lies beyond ±⅛; an interval across ±⅛ leaves the point undecided), "
          "then set beside what Claims 7.1–7.3 and 7.6 predict (the same lines for SGD "
          "and Adam in Def. 6.2's γ), at two widths. Beside them the n → ∞ limit "
          "(nfd.simulate, coupled backward) at α ∈ [½, 1]: it measures x^ℓ and h^ℓ at "
          "init and Δf only (it records no probe paths, so not Δx^ℓ, Δh^ℓ or the "
          "remainder), and Δf's exponent is read only where the Monte Carlo noise, "
          "the seeds' spread of the deterministic limit, is below a quarter of Δf's "
          "mean square at every depth.",
          run_tp6_map, summarize_tp6_map, plot_tp6_map, conclude_tp6_map),
)}


def _run_info(quick: bool, scheduler: str | None, device) -> str:
    return (f"nfd {package_version()} · torch {torch.__version__} · "
            f"Python {platform.python_version()} · {'quick' if quick else 'full'} "
            f"version, scheduler {scheduler or 'serial'}, device {device or 'default'}")


def _header(quick: bool, scheduler: str | None, device) -> str:
    return (f"Last run: {_run_info(quick, scheduler, device)}\n\nReference: {PAPER}. "
            "Every verdict below is computed from the measured estimate and its 95% "
            "bootstrap interval (over seeds).")


def run_validation(studies: Sequence[str] | None = None, *, out: str | Path,
                   quick: bool = False, scheduler: str | None = None,
                   progress: bool = True, device=None) -> Path:
    """Run validation studies and write ``out/<study>.nc``, ``out/<study>.png`` and
    ``out/REPORT.md``; finished jobs are kept in ``out/jobs`` and reused by a rerun.

    Parameters
    ----------
    studies : sequence of str, optional
        Names from :data:`STUDIES` (default: all).
    out : str or Path
        Output directory.
    quick : bool
        The small versions (each about a minute on a 2-core CPU).
    scheduler : str, optional
        ``None``/``"serial"``, ``"processes[:N]"`` or a dask scheduler address.
    progress : bool
        Progress bars.
    device
        Torch device for every study.

    Returns
    -------
    Path
        The report (covering every study whose netCDF is in ``out``, and the
        sections of an earlier REPORT.md there for studies whose netCDF is not).
    """
    names = list(STUDIES) if not studies else list(studies)
    unknown = [s for s in names if s not in STUDIES]
    if unknown:
        raise ValueError(f"studies: unknown {unknown}; choose from {list(STUDIES)}")
    netcdf_engine(), pyplot()  # a missing extra fails now, not after hours of sweeps
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    store = ResultsStore(out / "jobs" / ("quick" if quick else "full"))
    for name in names:
        study = STUDIES[name]
        t0 = time.perf_counter()
        ds = study.run(quick=quick, store=store, scheduler=scheduler, progress=progress,
                       device=device)
        ds.attrs["wall_time_s"] = time.perf_counter() - t0
        ds.attrs["run_info"] = _run_info(quick, scheduler, device)
        ds.to_netcdf(out / f"{name}.nc", engine=netcdf_engine())
        study.plot(ds, out / f"{name}.png")
    return write_report(out, header=_header(quick, scheduler, device))


_KEPT_NOTE = ("_Not regenerated: this section is kept from the earlier REPORT.md in this "
              "folder, whose data file `{name}.nc` is not here._")


def _earlier_sections(report: Path) -> dict[int, tuple[str, str]]:
    """``{number: (title, body)}`` of the ``## N. title`` sections of an existing
    report (body verbatim, without the heading)."""
    if not report.exists():
        return {}
    parts = re.split(r"^## (\d+)\. (.*)$", report.read_text(), flags=re.MULTILINE)
    return {int(parts[i]): (parts[i + 1].strip(), parts[i + 2].strip("\n"))
            for i in range(1, len(parts) - 2, 3)}


def _study_section(out: Path, name: str, study: Study, refit: bool) -> tuple:
    """(title, description, findings, figure) of a study from ``out/<name>.nc``;
    with ``refit`` the stored fits are recomputed and the file and figure rewritten."""
    path = out / f"{name}.nc"
    with xr.open_dataset(path) as ds:
        ds = ds.load()
    if refit:
        prefixes = [k[: -len("_model")] for k in ds.attrs if k.endswith("_model")]
        ds.attrs = {k: v for k, v in ds.attrs.items()
                    if not any(k.startswith(p + "_") for p in prefixes)}
    findings = study.summarize(ds)  # (re)fits missing fits, keeping them in attrs
    if refit:
        ds.to_netcdf(path, engine=netcdf_engine())
        study.plot(ds, out / f"{name}.png")
    wall = float(ds.attrs.get("wall_time_s", float("nan")))
    mode = "quick" if int(ds.attrs.get("quick", 0)) else "full"
    run = f"; {ds.attrs['run_info']}" if "run_info" in ds.attrs else ""
    description = (f"{study.description}\n\n({mode} version, {wall:.0f} s{run}; "
                   f"data: `{name}.nc`)")
    if study.conclude is not None:
        description += "\n\n" + study.conclude(ds)
    figure = f"{name}.png" if (out / f"{name}.png").exists() else None
    return f"{study.number}. {study.title}", description, findings, figure


def write_report(out: str | Path, *, header: str = "", refit: bool = False) -> Path:
    """REPORT.md for every study whose ``<name>.nc`` is in ``out`` (so runs of
    different studies accumulate), findings recomputed from the files.

    A study without its netCDF in ``out`` keeps its section of the REPORT.md
    already there, verbatim, marked as not regenerated.

    Parameters
    ----------
    out : str or pathlib.Path
        The directory holding the studies' ``<name>.nc`` files and figures; the
        report is written there as ``REPORT.md``.
    header : str
        Text under the report's title (run parameters).
    refit : bool
        Discard the fits kept in each file's attrs and recompute them (after a
        change to the fitting code), rewriting the files and figures.

    Returns
    -------
    pathlib.Path
        The path of the REPORT.md written.
    """
    out = Path(out)
    report = out / "REPORT.md"
    earlier = _earlier_sections(report)
    sections = []
    for name, study in sorted(STUDIES.items(), key=lambda item: item[1].number):
        if (out / f"{name}.nc").exists():
            sections.append(_study_section(out, name, study, refit))
        elif study.number in earlier:
            title, body = earlier[study.number]
            note = _KEPT_NOTE.format(name=name)
            if "Not regenerated" not in body:
                body = f"{note}\n\n{body}"
            sections.append((f"{study.number}. {title}", body, None, None))
    report.write_text(format_report(sections, header=header))
    return report
