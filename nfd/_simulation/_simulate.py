"""``nfd.simulate``: the Neural Feature Dynamics of Definition 1 over a particle ensemble.

Discretisation (τ = T/L, trajectories i = 0, 1, … in SGD order, B per step, trajectory i
from step s(i), χ_i = ℒ′(f̊^{(i)}, y^{(i)})/B, history = trajectories of earlier steps),
at SGD step k with the optimizer's coefficients a_k, c_{k,s} (below)::

    h_0^{(k)} = a_k u·x^{(k)}/√d − Σ_i w_i (x^{(i)}·x^{(k)}/d) g_0^{(i)}
    h_ℓ^{(k)} = h_{ℓ−1}^{(k)} − τ Σ_i w_i Σ_{ℓ−1}[i,k] g_ℓ^{(i)} + a_k √τ z_ℓ^{(k)}
    g_L^{(k)} = a_k v − Σ_i w_i h_L^{(i)},        f̊^{(k)} = E[g_L^{(k)} h_L^{(k)}] / γ₀
    g_{ℓ−1}^{(k)} = g_ℓ^{(k)} − τ Σ_i w_i Θ_ℓ[i,k] φ(h_{ℓ−1}^{(i)}) φ′(h_{ℓ−1}^{(k)})
                    + a_k √τ φ′(h_{ℓ−1}^{(k)}) z̃_ℓ^{(k)}
    w_i = γ₀ c_{k,s(i)} χ_i

with Σ_{ℓ−1}[i,j] = E[φ(h_{ℓ−1}^{(i)})φ(h_{ℓ−1}^{(j)})], Θ_ℓ[i,j] = E[g_ℓ^{(i)}g_ℓ^{(j)}],
and z, z̃ independent growing Gaussian drivers (:class:`sde.GrowingGaussianDriver`).
The drift of h_ℓ multiplies g_ℓ (appendix E of paper 002; the g_{ℓ−1} of its eq. 4
is a typo). With L steps this is exactly the n → ∞ limit of a depth-L network whose
backward pass uses an independent weight copy receiving the same updates
(``backward="decoupled"``); as L → ∞ it is Definition 1.

The optimizer (``nfd._optim``). The network f = vᵀh_L/(γ₀n) is trained by
``torch.optim.SGD(lr=η_c(k)γ₀²n, momentum=β, weight_decay=λ/(γ₀²n))``. Its update is
linear, so every weight matrix after k steps is θ_k = a_k θ_0 − Σ_{s<k} c_{k,s} ∇̂_s
with ∇̂_s = γ₀²n ∂ℒ̄_s/∂θ and the scalars of the recurrence m_k = βm_{k−1} + ∇̂_k + λθ_k,
θ_{k+1} = θ_k − η_c(k) m_k (paper 000, App. K.5 for momentum, App. L for weight decay,
and its γ₀, η₀(t) parametrization). The initial weights enter only through u, v and
the drivers (W_ℓ(0)φ/√n and W_ℓ(0)ᵀg/√n), which are therefore scaled by a_k, the
coupled limit's response terms included; each rescaled gradient ∇̂_s carries a γ₀
(∂f/∂θ has 1/γ₀, the learning rate γ₀²), hence w_i. Plain SGD (β = λ = 0, γ₀ = 1,
one η_c) has a_k = 1 and w_i = η_c χ_i: the equations of paper 002. In the decoupled
network the backward copy W̃ receives the same gradients and decays with its own
value, so W̃_k − W_k = a_k (W̃_0 − W_0): both of its drivers carry a_k.

Vector outputs (C ≥ 2: ``loss="mse"`` with targets (N, C), ``loss="cross_entropy"``
with integer labels). The network f = Vᵀh_L/(γ₀n) has a readout V (n, C), so each
particle carries a readout row v ∈ ℝ^C, v ~ N(0, I_C), and the output of column c is
f̊_c^{(k)} = E[v_c(k) h_L^{(k)}]/γ₀. Backprop is linear in the output error: the
gradient of ℒ^{(i)} at h_L is Σ_c χ_{i,c} v_c(k)/(γ₀n), one backward field per
trajectory as for C = 1, with χ_i = ℒ′(f̊^{(i)}, y^{(i)}) ∈ ℝ^C. Every field's
drift takes it with a scalar weight, so the history stores the field of the unit
direction ê_i = χ_i/‖χ_i‖ (Σ_c/√C when χ_i = 0, weight 0) and its norm::

    g_L^{(k)} = Σ_c ê_{k,c} v_c(k),                 v_c(k) = a_k v_c − Σ_i γ₀ c_{k,s(i)} χ_{i,c}/B h_L^{(i)}
    w_i = γ₀ c_{k,s(i)} ‖χ_i‖/B                     (the drifts of h_0, h_ℓ, g_{ℓ−1} above)

The backward pass is exactly linear in g_L under a positive rescaling (the driver's
new component, its Cholesky border and the response functions all scale with it),
so ‖χ_i‖·(field of ê_i) is the field of Σ_c χ_{i,c} v_c(k). Scalar runs (C = 1) keep
the form above, g_L = v with χ_i in w_i: their numbers do not move.

Adam and AdamW (``optimizer=nfd.Adam() | nfd.AdamW()``, ``nfd._simulation._adam``): the
update is entrywise, not linear in the gradients, so the learned part of each W_ℓ is
a dense P×P state A_ℓ (with Adam's m_ℓ, v_ℓ) and the drifts above become particle
means of it, h_ℓ −= τ (1/P) Σ_j A_ℓ[i, j] φ_j and g_{ℓ−1} −= τ φ′ (1/P) Σ_i A_ℓ[i, j] g_i,
with h_0 −= A_U x/√d and v(k) = a_k v − A_V; the history weights w_i are zero, and
the drivers and the response drifts below are unchanged (a_k from AdamW's decay).

Ordinary backprop (``backward="coupled"``) uses W_ℓ forward and W_ℓᵀ backward, so
the sources z_ℓ = W_ℓφ/√n and z̃_ℓ = W_ℓᵀg/√n respond to each other. Its n → ∞ limit
(Bordelon, Noci, Li, Hanin & Pehlevan, "Depthwise hyperparameter transfer in
residual networks: dynamics and scaling limit", ICLR 2024, paper 000 eq. 38, here
for SGD steps) adds two response drifts::

    h_ℓ^{(k)}     += a_k √τ Σ_{s<k} A_ℓ(k,s) g_ℓ^{(s)},      A_ℓ(k,s) = E[∂φ(h_{ℓ−1}^{(k)})/∂z̃_ℓ^{(s)}]
    g_{ℓ−1}^{(k)} += a_k √τ φ′(h_{ℓ−1}^{(k)}) Σ_{s≤k} B_ℓ(k,s) φ(h_{ℓ−1}^{(s)}),
                                                          B_ℓ(k,s) = E[∂g_ℓ^{(k)}/∂z_ℓ^{(s)}]

Both are estimated from the particles by Stein's lemma: a driver stores its
innovations ξ with z = 𝓛ξ, so E[∂F/∂z] = 𝓛^{−T} E[F ξ]
(:meth:`sde.GrowingGaussianDriver.stein_derivative`). For P particles this is the
conditional mean of a width-P network's W φ given both W Φ_{<k} and Wᵀ G_{<k}: the
term Gᵀ𝓛̃^{−T}(Ξ̃φ/P). It costs two more k×P streams per layer-step and no memory.
"""

from __future__ import annotations

import warnings
from typing import Callable, NamedTuple, Sequence

import torch
import xarray as xr
from tqdm.auto import tqdm

from sde import ThreadTeam, fusing_borders, serial

from .._model import Activation, Loss, Parametrization
from .._optim import OptimizerSpec, SGDSpec
from .._schema import (DEFAULT_DIVERGENCE, DEFAULT_PROGRESS, REMOVED_KEYWORDS, Record,
                       check_input_scale, removed_keywords)
from ._checks import Config, check_particle_init, check_simulate
from ._dataset import assemble
from ._errors import (DEFAULT_ERROR_REPLICAS, calibrate_errors, escalates,
                      replica_diverged, replica_seeds, run_replica_particles,
                      uncalibrated)
from ._adam import warn_if_first_sign_unresolved
from ._reference import reference_config, referencing
from ._replay import check_replayable, replaying
from ._state import fit_together, start_group
from ._step import (evaluate_probes, record_eigenvalues, set_optimizer, sgd_step,
                    warn_if_floors_matter)

__all__ = ["simulate"]


@removed_keywords("simulate", REMOVED_KEYWORDS)
def simulate(
    X,
    y,
    *,
    eta_c: float | Sequence[float] | Callable[[int], float],
    depth: int = 64,
    optimizer: OptimizerSpec = SGDSpec(),
    parametrization: Parametrization = Parametrization(),
    activation: str | Activation | Callable = "relu",
    loss: str | Loss | Callable = "mse",
    classes: int | None = None,
    batch_size: int = 1,
    particles: int = 4096,
    backward: str = "coupled",
    seed: int = 0,
    device=None,
    dtype=None,
    rel_jitter: float | None = None,
    innovations: tuple[torch.Tensor, torch.Tensor] | None = None,
    error_replicas: int = DEFAULT_ERROR_REPLICAS,
    particle_init: str = "iid",
    record: Record = Record(),
    divergence: float | None = DEFAULT_DIVERGENCE,
    progress: bool = DEFAULT_PROGRESS,
) -> xr.Dataset:
    """Integrate the infinite-width training dynamics of a depth-L ResNet under online SGD.

    Particles carry their row ``u ~ N(0, I_d)`` of U and readout ``v ~ N(0, 1)``; the
    L-step Euler–Maruyama system (the module docstring, :doc:`/guide/equations`) is
    the n → ∞ limit of a depth-L
    ResNet (eq. 1 of paper 002) trained in the feature-learning regime (α = 1/√n,
    learning rate η_c·n on every parameter), either by ordinary backprop
    (``backward="coupled"``, the response-function limit of paper 000) or with an
    independent backward weight copy (``backward="decoupled"``, whose ``depth → ∞``
    limit is the Neural Feature Dynamics of paper 002, Definition 1 / Theorem 1).

    Parameters
    ----------
    X : array_like, shape (K·B, d)
        Training stream, consumed in order, B rows per SGD step.
    y : array_like, shape (K·B,) or (K·B, C)
        Targets: ±1 labels for ``loss="logistic"``; integer class labels 0..C−1 for
        ``loss="cross_entropy"``; for ``loss="mse"`` (or a callable) values of
        shape (K·B,) (one output, or (K·B, 1)) or (K·B, C) (C ≥ 2 outputs,
        ℒ = ½‖f − y‖²). Integer-typed mse targets with more than two values are
        refused as class labels, and so are one-hot arrays for ``"cross_entropy"``.
    eta_c : float, sequence of float or callable
        Effective learning rate η_c ≥ 0: the network's ``torch.optim.SGD`` has
        lr = η_c·γ₀²·n. A sequence of K values (K = len(X)/batch_size) or a callable
        k → η_c(k) is a schedule: step k (0-based) uses η_c(k).
    depth : int
        L, the number of Euler–Maruyama steps = the depth of the matching network
        (``validation.train_resnet``'s ``depth``).
    optimizer : nfd.SGD, nfd.Adam or nfd.AdamW
        The matching network's optimizer (default ``nfd.SGD()``, plain SGD).
        ``nfd.SGD(momentum=β, weight_decay=λ)``: ``torch.optim.SGD`` as above, with
        β in [0, 1) (dampening 0, no Nesterov; paper 000, App. K.5) and torch's
        ``weight_decay`` λ/(γ₀²n), so that without momentum every step multiplies
        the weights by 1 − η_c(k)·λ (paper 000, App. L); in the decoupled limit the
        backward copy decays with the same factor.
        ``nfd.Adam(betas, eps)`` / ``nfd.AdamW(betas, eps, weight_decay)``:
        ``torch.optim.Adam`` / ``AdamW`` with
        depth-μP's per-group scaling (Tensor Programs VI, Def. 6.1 and Table 1;
        :class:`nfd.schema.AdamRun`): U and V at lr η_c(k) with eps ε/n, every W_ℓ
        at lr η_c(k)·√(T/(Ln)) with eps ε·√(T/L)/n^{3/2}, AdamW's weight_decay λ
        (λ/√(T/(Ln)) on W), so that each group's direction m̂/(√v̂ + ε) is that of
        its rescaled gradient and every step moves each layer's features by
        Θ(T/L). Adam's update is not low rank: the limit keeps dense P×P states
        per layer (``nfd._simulation._adam``: 3·L·P² numbers, 1.6 GB at L = 8,
        P = 4096 in float32; :func:`nfd.memory_estimate`), and a layer-step costs
        O(P²·B) instead of O(K·B·P). Refused with ``gamma0`` ≠ 1 and two-layer
        blocks (``nfd.Adam`` has no ``weight_decay``: torch's L2 term has no
        width-independent meaning; use ``nfd.AdamW``). Use P ≥ 16·K·B
        (:ref:`arg-optimizer`); ``dtype`` is then that of the dense states.
        (β₁, β₂) each in [0, 1), default (0.9, 0.999), torch's; ε ≥ 0 in the
        rescaled units above (Θ(1) as n → ∞), default 1e-8, torch's. ε = 0 is
        sign-like descent; it gives NaN wherever a gradient entry is exactly 0 (as
        torch does), e.g. for relu's inactive units.
    parametrization : nfd.Parametrization
        How the matching network scales (default depth-μP,
        ``nfd.Parametrization()``; presets :meth:`nfd.Parametrization.complete_p`,
        ...). The limit integrates the depth-μP stream in the feature regime; its
        fields:

        ``T``: the time horizon. ``gamma0``: γ₀ > 0, the feature-learning strength
        of paper 000: the network's output is f = vᵀh_L/(γ₀n). Features move by
        O(γ₀) per step while f moves by O(η_c); γ₀ → 0 is kernel gradient descent
        with :func:`nfd.ntk_kernel`. The Monte Carlo error of f grows like 1/γ₀
        (``f_se``).

        ``block``: ``"post-nonlin-ms"``: Tensor Programs VI's block (paper 001
        §6.3), h_ℓ = h_{ℓ−1} + a·τ^α·MS(φ(W_ℓh_{ℓ−1}/√n)) with MS the mean
        subtraction over neurons (``block_multiplier`` a, ``branch_exponent`` α ∈
        [½, 1] and ``lr_exponent`` γ, paper 001 Def. 6.2: W_ℓ at lr η_c·n·τ^{γ−α}
        under SGD, η_c·τ^γ/√n under Adam; ``layernorm``: pre-LayerNorm, paper 001
        Fig. 12; SGD, Adam and AdamW),
        whose limit has two drivers per layer, of W_ℓh_{ℓ−1}/√n and W_ℓᵀa_ℓ/√n, and
        subtracts the particle mean of φ (``nfd._simulation._msblock``,
        :doc:`/guide/tp6_limit`). Then ``sigma_*`` are those of the h_ℓ driver (Σ is
        E[h_ℓh_ℓ′]) and ``theta_*`` of the a_ℓ driver (NaN at t_0). ``"two-layer"``:
        paper 002 eq. 6,
        x_ℓ = W_{ℓ,1}h_{ℓ−1}/√n, h_ℓ = h_{ℓ−1} + √(τ/n) W_{ℓ,2}φ(x_ℓ), whose limit
        has four drivers per layer (``nfd._simulation._twolayer``,
        docs/two_layer_limit.md): about twice the memory and time. Then
        ``sigma_*`` are those of the φ(x_ℓ) driver and ``theta_*`` of the g_ℓ driver
        (Σ at t_L is NaN); the floored counts add both drivers of each direction.
        In the two-layer limit the backward modes differ at O(1) as L grows
        (docs/two_layer_limit.md §5): only ``"coupled"`` is ordinary backprop.

        ``first_layer_lr``: two-layer blocks, W_{ℓ,1} learns at m·η_c·γ₀²·n with m = 1 (depth-μP) or
        m = √L (eq. 8), with the same momentum and weight decay (its optimizer
        coefficients are the recurrence's at m·η_c).

        ``hidden_lr``: adam's depth rule for the hidden rate: ``"depth-mup"`` (default, above) or
        ``"block-only"``, Tensor Programs VI's baseline that scales the branch but
        not the rate ((α, γ) = (½, 0), its Fig. 10): every W_ℓ at lr η_c(k)·√(T/n),
        √L times depth-μP's, so the learned block's drift is multiplied by √L (a
        width limit at each L, no depth limit). Adam only. With a branch exponent
        α: lr η_c(k)·T^{1−α}/√n, L^{1−α} times the depth-μP rate.

        ``branch_exponent``: α ∈ [½, 1], the branch multiplier (T/L)^α of the matching network,
        h_ℓ = h_{ℓ−1} + (T/L)^α W_ℓ φ(h_{ℓ−1})/√n: ½ is depth-μP (the default),
        1 the ODE / CompleteP parametrization (paper 001 §5; paper 000 App. M).
        The network's hidden rate keeps each layer's feature update Θ(T/L):
        W_ℓ at lr η_c(k)·n·(T/L)^{1−2α} under SGD (U and v at η_c(k)·n), and at
        η_c(k)·(T/L)^{1−α}/√n with eps ε·(T/L)^α/n^{3/2} under Adam; W's torch
        ``weight_decay`` is divided by the same factor (lr·weight_decay = η_c·λ in
        every group). In the limit every drift is that of α = ½, while the
        initial weights' drivers and the coupled limit's response terms scale by
        (T/L)^{α−½} (``nfd._model._depth``): for α > ½ they vanish as L → ∞ and the
        limit becomes an ODE in depth time. One-layer blocks and
        ``"post-nonlin-ms"`` (whose limit at α: :doc:`/guide/tp6_limit`).

        ``trainable``: the parameters that learn (default all three); must contain "W". A
        frozen U or readout v keeps its initial value (no update, no decay): the
        setting of paper 001 §3–4 and of paper 000's main text, ``("W",)``.
    activation : str or callable
        φ; see :func:`nfd.get_activation`.
    loss : {"mse", "logistic", "cross_entropy"} or callable
        ``"mse"``: ½(f − y)² (½‖f − y‖² for C outputs); ``"logistic"``:
        log(1 + e^{−yf}); ``"cross_entropy"``: −log softmax(f)_y over C ≥ 2
        outputs; or a callable returning ∂ℒ/∂f(f, y) element-wise (the recorded
        loss is then NaN). Vector outputs: :doc:`/guide/equations`.
    classes : int, optional
        C ≥ 2 for ``loss="cross_entropy"``: the number of outputs (default: the
        largest label + 1). Refused with the other losses.
    batch_size : int
        B; each SGD step averages the gradient over B samples, each with its own
        trajectory in the history.
    particles : int
        P ≥ 2. The coupled limit's response functions are Stein estimates over the
        K·B trajectories of the history. With the Stein truncation at 10⁻³ (float32's
        level before issue 54) they were heavy-tailed unless P ≫ K·B, and P ≥ 64·K·B
        was needed where it mattered (:ref:`arg-particles`); at today's 10⁻²
        (``sde.STEIN_TRUNCATION``) ten-class digits at P ≈ 4·K·B showed none in 8
        seeds (each run 0.19–0.26 rms from the seed mean of width-1024 networks,
        whose own bias is part of that), which cannot rule out a rare bad draw. Check a
        new setting with independent seeds (``examples/error_calibration.py``).
    backward : {"coupled", "decoupled"}
        Which network's limit to integrate. ``"coupled"`` (default): ordinary
        backpropagation, the network people train; its limit keeps the forward and
        backward response functions A_ℓ, B_ℓ of Bordelon, Noci, Li, Hanin &
        Pehlevan, "Depthwise hyperparameter transfer in residual networks: dynamics
        and scaling limit", ICLR 2024 (paper 000, eq. 38, App. E), estimated from
        the particles by Stein's lemma (:doc:`/guide/equations`). ``"decoupled"``: the
        backward pass uses an independent weight copy receiving the same updates
        (gradient independence); its limit is Definition 1 of paper 002. The two
        differ by O(1) at every depth (:doc:`/guide/steps_backward`). The coupled
        estimate's finite-P error grows with the number k of trajectories relative
        to P: keep P ≫ K·B (:ref:`arg-backward`).
    seed : int
        Seed of the run. Each random role draws from its own stream derived from it
        (particles u, v; forward driver; backward driver; probe draws), so probes,
        ``paths``, ``eig_steps`` and ``progress`` never change a training number.
        Reproducibility: bit for bit for the same seed, device, dtype, torch version
        and thread count (:ref:`arg-seed`).
    device : str or torch.device, optional
        Default: CUDA if available, else CPU.
    dtype : torch.dtype or str, optional
        Default float32. Both dtypes truncate the coupled limit's Stein estimates at
        the same level (``sde.STEIN_TRUNCATION``); at float64's earlier, lower level
        coupled float64 runs on ten-class digits diverged or trained to wrong numbers
        where float32 trained (issue 54; :ref:`arg-optimizer`).
    rel_jitter : float, optional
        Relative eigenvalue floor of the growing drivers (singular covariances from
        repeated inputs or dead units are regularised; ``sigma_floored`` and
        ``theta_floored`` count the floored components); default 1e-5 in float32,
        1e-10 in float64. A ``RuntimeWarning`` is issued for rel_jitter ≥ 1e-3 with
        ≥ 2% of the components floored (:ref:`arg-rel-jitter`). The coupled limit's
        Stein truncation is at least 100·rel_jitter of a component's variance
        (``sde.STEIN_ROUNDING``; ``sde.STEIN_TRUNCATION`` = 1e-2 otherwise): above
        rel_jitter = 1e-4 it rises, and at 1e-2 nearly every response term is
        dropped.
    innovations : (Tensor, Tensor), optional
        Standard normal innovations of the forward and backward drivers, each of
        shape (depth, K·B, particles) in ``dtype``, used instead of drawing them
        (probe noise is still drawn from ``seed``). For runs that share their
        Brownian paths across depths: see :func:`nfd.coarsen_innovations`.
    error_replicas : int
        R, the number of independent replica runs (own seeds, own mean field of
        P/8 particles, at least 512 and, coupled, at least 8·K·B, at most P) from
        which the standard errors ``f_se`` and ``probe_f_se`` take the particles'
        interaction into account (``nfd._simulation._errors``): the error of a particle
        mean is not its per-particle spread / √P, because every particle moves with
        the noise of the shared mean-field estimates. The reported error is the
        per-particle one times the inflation ρ̂ pooled over the R + 1 runs within
        windows of the history (variables ``f_se_inflation``,
        ``probe_f_se_inflation``). Never changes an estimate. Default 2; ``0``
        reports the per-particle errors (inflations NaN) and saves the replicas'
        cost. The replicas run in lockstep with the run, sharing its small algebra
        (``nfd._simulation._lockstep``), where run and replicas fit in memory
        together (``nfd.memory_estimate`` of each), else after it (and always with
        two-layer and ``"post-nonlin-ms"`` blocks): every number is the same either way.
        A replica that diverges where the run trains is replaced by a fresh one after
        the run, with a warning (the errors are NaN only if a replacement diverges
        too); ``attrs["error_replicas_replaced"]`` counts the replacements (0
        without replicas; a replacement that diverged too is counted, and so are
        those of escalated replicas, below). With
        ``nfd.Adam`` / ``nfd.AdamW``, and with ``particle_init="sobol"``, the
        replicas hold P particles, as many as
        the main run, so they cost about R times the run. Where a coupled run's
        replicas hold at most P/3 particles and read an inflation above 1.5
        anywhere, R fresh replicas of P particles run after the run and give its
        errors instead (``attrs["error_replicas_escalated"]`` = 1,
        ``error_replica_particles`` = P): where the particles' interaction amplifies
        the error, replicas well below the run's size read it off (on ten-class
        digits replicas of P/8 left the errors too wide at P = 32 768, replicas of
        P/4.3 too narrow late at 8192); that costs about R more runs, where it
        escalates only.
        Calibration and cost: :ref:`arg-error-replicas`.
    particle_init : {"iid", "whitened", "sobol"}
        The initial particles (u, v): independent N(0, I) draws (the default);
        those draws whitened jointly, so that their empirical mean is 0 and their
        covariance exactly I_{d+C} (:func:`~nfd._simulation._state.whiten_jointly`;
        a variance reduction, issue 36); or randomized quasi-Monte Carlo points,
        scrambled Sobol' points in d + C dimensions mapped through Φ⁻¹, each row
        N(0, I) (to 2⁻³⁰) but the rows spread evenly
        (:func:`~nfd._simulation._state.sobol_particles`; issue 54). Measured
        (:ref:`arg-particle-init`): the seed variance of f and probe_f falls to
        0.53–0.62 of i.i.d. draws' at the quickstart setting with ``"sobol"``
        (0.62–0.72 whitened), and to 0.44–0.80 coupled and 0.57 decoupled on ten-class
        digits, with no bias resolved. Either way the rows are not independent: the
        per-particle error is not the run's, so keep ``error_replicas`` (drawn the
        same way, with seeds of their own, they calibrate the errors). With
        ``"sobol"`` the replicas hold P particles, as many as the run (the points'
        gain depends on P, so only replicas of the run's size measure its error), so
        they cost about R times the run, as with Adam. ``"whitened"`` needs more
        particles than d + C in every run, error replicas included; ``"sobol"``
        needs d + C ≤ 21 201.
    record : nfd.Record
        What to record beside the training numbers (nothing of which changes).
        ``probes`` (array_like (Q, d), array_like (Q,) or (Q, C)): held-out inputs and targets (of the training targets' kind) evaluated forward-only at ``probe_steps`` with
        the parameters of that step; their noise is conditioned on the training
        history, not appended to it. Each probe has exactly its own conditional law;
        the probes share their fresh noise (one normal per layer and particle), so
        their errors are correlated: average a loss over probes, but take its
        standard error from seeds, not from ``probe_f_se`` / √Q.

        ``probe_steps``: in 0..K (K = after the last update); default ≤ 17 evenly spaced, with 0, K
        (``nfd.schema.DEFAULT_PROBE_STEPS``: an evaluation of Q probes costs about
        Q/16 training steps).

        ``eig_steps``: steps (0..K−1) after which to record the smallest eigenvalues of Σ_ℓ and
        Θ_ℓ (Assumption 1); default ≤ 5 evenly spaced steps.

        ``paths``: number of particles whose h and g paths are kept.

        ``collapse``: two-layer blocks, record ``internal_update`` and ``residual_update`` (step,
        block_time), the batch means of the rms learned change of x_ℓ (eq. 27, x
        against its frozen-weight value W_{ℓ,1}(0)h/√n) and of the residual
        increment's learned part (eq. 33–34), as the networks record them. They
        have no standard error, and a root mean square over particles is biased
        upward by the Monte Carlo noise of the drift and response coefficients
        (≈ noise²/(2·value), so most where the learned change is small): check a
        value by doubling P (:ref:`arg-record-collapse`).
    divergence : float or None
        Stop with ``FloatingPointError`` once E[h_t²] or E[g_t²] exceeds this many
        times its largest value at step 0, or f² this many times E[h²]E[g²] at step
        0 (training and probe passes alike; :class:`nfd.schema.DivergenceGuard`).
        ``None`` stops on NaN/inf only. Default 1e4.
    progress : bool
        Show a tqdm progress bar over SGD steps (default ``nfd.schema.DEFAULT_PROGRESS``).

    Returns
    -------
    xarray.Dataset
        Dimensions ``step`` (K), ``sample`` (B), ``time`` (t_ℓ = ℓT/L, ℓ = 0..L),
        ``probe``, ``probe_step``, ``eig_step``, ``particle``. Variables:
        ``f``, ``f_se`` (Monte Carlo standard error, see ``error_replicas``), ``y``,
        ``loss``, ``dloss``
        (step, sample); ``h2`` = E[h²] and ``g2`` = E[g²] (step, time), averaged
        over the batch; ``sigma_pivot`` / ``theta_pivot`` (step, time): the smallest
        squared Cholesky pivot of each driver's new components, i.e. the conditional
        variance of a new component given the history (and, for B ≥ 2, the batch's
        earlier samples), before the floor (NaN where no driver acts: Σ at t_L, Θ at
        t_0); ``sigma_floored`` / ``theta_floored`` (step,
        time): how many of the step's B new components of each driver sat at the
        eigenvalue floor (0 where no driver acts); ``sigma_min_eig`` / ``theta_min_eig``
        (eig_step, time); ``probe_f``, ``probe_f_se``, ``probe_loss``
        (probe_step, probe) and ``probe_y``; ``f_se_inflation`` (step, sample)
        and ``probe_f_se_inflation`` (probe_step, probe), see ``error_replicas``;
        ``h_path`` / ``g_path`` (particle, step, sample, time) when ``paths``.
        Classification losses (``"logistic"``, ``"cross_entropy"``) with probes add
        ``probe_accuracy`` (probe_step): the share of probes with sign f = y,
        argmax f = y (a tie counts as wrong). With C ≥ 2 outputs, ``f``, ``f_se``, ``dloss``,
        ``probe_f``, ``probe_f_se`` and their inflations have a last dimension
        ``output`` (c = 0..C−1), and so do ``y`` and ``probe_y`` unless they are
        class labels; ``loss`` and ``probe_loss`` are per sample; ``g2`` and
        ``g_path`` are those of the unit-direction fields (:doc:`/guide/equations`).
        Every parameter is in ``attrs``, and ``attrs["fused_borders"]`` is 1 for a
        run made under :func:`sde.fused_borders`, ``attrs["graph_replay"]`` for one
        made under :func:`nfd.graph_replay` (the numbers of either agree with the
        default run's within rounding, not bit for bit), and
        ``attrs["reference_responses"]`` the reference's particles of a run made under
        the ablation :func:`nfd.reference_responses` (0 otherwise; its seed and which
        responses it gave in ``attrs["reference_responses_seed"]`` and
        ``attrs["reference_responses_taken"]``); every variable and coordinate has
        ``long_name`` and ``units`` (:mod:`nfd.schema`).

    Raises
    ------
    ValueError, TypeError
        Bad arguments (the message names the argument).
    MemoryError
        Before allocating, if the run does not fit (see :func:`nfd.memory_estimate`).
    FloatingPointError
        When a training step or probe pass diverges (see ``divergence``) or becomes
        NaN/inf; names the step, the layer and the quantity, and the input scale
        when |x|²/d is far from 1.

    Warns
    -----
    UserWarning
        Once, when the inputs' mean |x|²/d is outside [1/4, 4] (the sphere
        convention the documented η_c and T ranges assume).
    RuntimeWarning
        When the drivers' eigenvalue floor was high and often active (``rel_jitter``).
    """
    cfg = check_simulate(X, y, eta_c=eta_c, depth=depth, optimizer=optimizer,
                         parametrization=parametrization, activation=activation, loss=loss,
                         classes=classes, batch_size=batch_size, particles=particles,
                         backward=backward, seed=seed, device=device, dtype=dtype,
                         rel_jitter=rel_jitter, innovations=innovations,
                         error_replicas=error_replicas, particle_init=particle_init,
                         record=record, divergence=divergence)
    if replaying():
        check_replayable(cfg)
    reference = reference_config(cfg) if referencing() else None
    replicas = _replica_configs(cfg)
    others = replicas if reference is None else [reference]
    check_particle_init(cfg, min(c.P for c in [cfg, *others]))
    scale = check_input_scale("X", cfg.X, stacklevel=4)  # user → wrapper → simulate → it
    if reference is not None:  # nfd.reference_responses(): it runs beside the run
        ds = uncalibrated(_with_reference(cfg, reference, scale, progress))
        ds.attrs.update(error_replicas_replaced=0, error_replicas_escalated=0)
    elif not replicas:
        ds = uncalibrated(_integrate([cfg], scale, progress)[0][0])
        ds.attrs.update(error_replicas_replaced=0, error_replicas_escalated=0)
    else:
        if cfg.solo or not fit_together([cfg, *replicas]):
            ds = _integrate([cfg], scale, progress)[0][0]
            done, reasons = _replicas(replicas, scale)
        else:
            (ds, *done), reasons = _integrate([cfg, *replicas], scale, progress)
        done, why = _complete(cfg, done, reasons, scale)
        done, why, full = _escalate(cfg, ds, done, why, scale)
        ds = calibrate_errors(ds, done, why)
        # one fresh replica ran for each that diverged (a warning said which)
        ds.attrs["error_replicas_replaced"] = len(reasons) + full.replaced
        ds.attrs["error_replicas_escalated"] = int(full.ran)
        if full.ran:
            ds.attrs["error_replica_particles"] = cfg.P
    ds.attrs["fused_borders"] = int(fusing_borders())  # sde.fused_borders(): within rounding
    ds.attrs["graph_replay"] = int(replaying())  # nfd.graph_replay(): within rounding
    particles, seed, taken = referencing() or (0, 0, "")  # nfd.reference_responses()
    ds.attrs["reference_responses"] = particles
    ds.attrs["reference_responses_seed"] = seed
    ds.attrs["reference_responses_taken"] = taken
    warn_if_first_sign_unresolved(ds, stacklevel=4)
    return ds


def _integrate(cfgs: list[Config], input_scale: float, progress: bool,
               replica: bool = False) -> tuple[list[xr.Dataset], list[str]]:
    """Runs of the particle system (module docstring) for checked configurations of
    one stream (``input_scale``: mean |x|²/d, for the divergence messages), the first
    with its error replicas ``cfgs[1:]`` in lockstep (``nfd._simulation._lockstep``):
    the Datasets (with the per-particle standard errors) of the run and of the replicas
    that finished, and why the others left it (each diverged). A ``replica`` run
    alone leaves the floor warning to the main run, and its divergence messages do
    not advise more particles (:func:`~nfd._simulation._state.start_group`)."""
    with serial():
        group = start_group(cfgs, input_scale, replica)
    main = group.states[0]
    cfg = cfgs[0]
    probe_index = {s: j for j, s in enumerate(cfg.probe_steps)}
    eig_index = {s: j for j, s in enumerate(cfg.eig_steps)}
    # the bar counts SGD steps (K of them; the pass k = K only evaluates the probes)
    bar = tqdm(total=cfg.K, disable=not progress, desc="nfd.simulate", unit="step")
    # The team (sized to the free cores) runs the split history products; everything
    # else runs on one thread, so no number depends on the team (sde._threads).
    with ThreadTeam(cfg.device) as team, bar:
        for k in range(cfg.K + 1):
            team.tick()
            with serial():
                for state in group.states:
                    set_optimizer(state)
                if k in probe_index:
                    evaluate_probes(group, probe_index[k])
                if k == cfg.K:
                    break
                sgd_step(group, k)
                if k in eig_index:
                    record_eigenvalues(main, eig_index[k])
            bar.update()
    if not replica:
        warn_if_floors_matter(main, stacklevel=5)
    return [assemble(s.cfg, s.rec) for s in group.states], group.reasons


def _with_reference(cfg: Config, reference: Config, input_scale: float,
                    progress: bool) -> xr.Dataset:
    """The run ``cfg`` in lockstep with its ``reference`` system
    (:func:`nfd.reference_responses`): a divergence names the reference, whose
    response functions the run takes, so that its advice is not only the run's."""
    try:
        return _integrate([cfg, reference], input_scale, progress)[0][0]
    except FloatingPointError as err:
        raise FloatingPointError(
            f"{err} [inside nfd.reference_responses({reference.P}, seed={reference.seed}): "
            "the run takes the reference system's response functions; if the run does not "
            "diverge outside the block, give the reference more particles]") from err


def _replica_configs(cfg: Config, first: int = 0, particles: int = 0) -> list[Config]:
    """The ``error_replicas`` replica runs of ``cfg`` (``nfd._simulation._errors``; none
    without): the same stream, probes and settings with their own seeds and
    :func:`~nfd._simulation._errors.run_replica_particles` particles (or ``particles``),
    drawing their own innovations, recording no paths or eigenvalues. ``first``: the
    first replica's number (its seed): R for the replacements of diverged ones
    (:func:`_complete`), 2R for the replicas of the run's size (:func:`_escalate`)
    and 3R for their replacements."""
    P = particles or run_replica_particles(cfg)
    seeds = replica_seeds(cfg.seed, first + cfg.error_replicas)[first:]
    return [cfg.companion(P, seed) for seed in seeds]


def _replicas(cfgs: list[Config], input_scale: float,
              first: int = 0) -> tuple[list[xr.Dataset], list[str]]:
    """The replica runs ``cfgs`` (numbered from ``first``) one after the other
    (two-layer blocks, replicas that do not fit in memory beside the run, or the
    replacements of diverged ones): the Datasets of those that finished, and why the
    others did not (each diverged)."""
    runs, reasons = [], []
    for r, rep in enumerate(cfgs, first):
        try:
            runs.append(_integrate([rep], input_scale, False, replica=True)[0][0])
        except FloatingPointError as err:
            reasons.append(replica_diverged(r, rep.P, err))
    return runs, reasons


def _complete(cfg: Config, done: list[xr.Dataset], reasons: list[str],
              input_scale: float, first: int | None = None, particles: int = 0,
              stacklevel: int = 4) -> tuple[list[xr.Dataset] | None, str]:
    """The error replicas for :func:`~nfd._simulation._errors.calibrate_errors`: those
    that finished (``done``) and, for each that diverged (``reasons``), a fresh one
    (replicas R, R + 1, …: seeds of their own, at most R of them, run after the
    run), with a ``RuntimeWarning`` that says which diverged; ``(None, why)`` when
    fewer than R finish even so. ``first`` and ``particles``: the first
    replacement's number and the replacements' size, if not R and the replicas' own
    (:func:`_replica_configs`); ``stacklevel`` points the warning at the user's call.

    A replica that diverges where the main run trained marks a heavy-tailed Monte
    Carlo error. Replacing it gives the spread of runs that do not diverge, which is
    what the main run is; measured (ten-class digits, η_c = 0.3, P = 8192, 16 seeds,
    ``examples/error_calibration.py``, one replica replaced): mean z² 1.10
    [0.95, 1.25], the run with the replacement 1.61."""
    if not reasons:
        return done, ""
    first = cfg.error_replicas if first is None else first
    fresh, more = _replicas(_replica_configs(cfg, first, particles)[:len(reasons)],
                            input_scale, first=first)
    reasons = reasons + more
    done = done + fresh
    if len(done) < cfg.error_replicas:
        return None, "; ".join(reasons)
    warnings.warn(f"{'; '.join(reasons)}. Each was replaced by a fresh replica that "
                  "trained, so the errors are those of runs that did not diverge, as the "
                  "main run did not; but a replica that diverges marks a heavy-tailed "
                  "Monte Carlo error: compare independent seeds "
                  "(examples/error_calibration.py) or lower eta_c",
                  RuntimeWarning, stacklevel=stacklevel)
    return done, ""


class _Escalation(NamedTuple):
    """Whether a run's errors came from replicas of its own size (:func:`_escalate`),
    and how many of those diverged and were replaced."""

    ran: bool
    replaced: int


def _escalate(cfg: Config, ds: xr.Dataset, done: list[xr.Dataset] | None, why: str,
              input_scale: float) -> tuple[list[xr.Dataset] | None, str, _Escalation]:
    """The replicas that give the run ``ds`` its errors: ``done`` (and ``why`` they are
    missing, if they are), or, where :func:`~nfd._simulation._errors.escalates` says
    they may read the inflation off, R fresh replicas of the run's own size P, run
    after it one after the other (replicas 2R, 2R + 1, …; a diverged one is replaced
    as by :func:`_complete`, from 3R on). They cost about R times the run, paid only
    where the particles' interaction amplifies the error."""
    if done is None or not escalates(ds, done):
        return done, why, _Escalation(False, 0)
    R = cfg.error_replicas
    full, reasons = _replicas(_replica_configs(cfg, 2 * R, cfg.P), input_scale, first=2 * R)
    full, why = _complete(cfg, full, reasons, input_scale, first=3 * R, particles=cfg.P,
                          stacklevel=5)
    return full, why, _Escalation(True, len(reasons))
