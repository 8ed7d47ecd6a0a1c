"""Online SGD of finite depth-μP ResNet ensembles (:func:`train_resnet`), recorded in
the schema of ``nfd.simulate`` (plus a leading ``seed`` dimension), and the
per-layer noise increments of a network at initialization (:func:`init_increments`).

Stream convention: X has K·B rows consumed in order, B per step; the forward pass
of step k uses the parameters after k updates (paper 002, §2 and appendix E).
The parts of a run: :mod:`._checks` (arguments), :mod:`._record` (run
state), :func:`sgd_step` here (one step), :mod:`._dataset` (the Dataset).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
import xarray as xr
from tqdm.auto import tqdm

import nfd
from sde import ThreadTeam, serial
from nfd.schema import (DEFAULT_DIVERGENCE, DEFAULT_PROGRESS, OPTIMIZER_TITLES,
                        REMOVED_KEYWORDS, DivergenceGuard, check_matrix, removed_keywords)

from ._memory import ensure_network_fits, network_memory_estimate
from ._base import expand_targets
from ._models import ResNetEnsemble
from ._step import mean_square
from ._checks import TrainRun, check_train
from ._dataset import as_numpy, to_dataset
from ._record import EigenHistory, Records

__all__ = ["train_resnet", "init_increments"]


@removed_keywords("train_resnet", REMOVED_KEYWORDS)
def train_resnet(
    X,
    y,
    *,
    width: int,
    depth: int,
    eta_c: float | Sequence[float] | Callable[[int], float],
    optimizer: nfd.SGD | nfd.Adam | nfd.AdamW = nfd.SGD(),
    parametrization: nfd.Parametrization = nfd.Parametrization(),
    activation: str | nfd.Activation | Callable = "relu",
    loss: str | nfd.Loss | Callable = "mse",
    classes: int | None = None,
    backward: str = "coupled",
    seeds: int | Sequence[int] = 1,
    batch_size: int = 1,
    n_steps: int | None = None,
    record: nfd.Record = nfd.Record(),
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    progress: bool = DEFAULT_PROGRESS,
    check_memory: bool = True,
    divergence: float | None = DEFAULT_DIVERGENCE,
) -> xr.Dataset:
    """Train an ensemble of finite depth-μP ResNets by online SGD or Adam (paper 002,
    §2, §4).

    The network is eq. 1 (``style="pre"``), eq. 9 (``"post"``) or the two-layer
    block of eq. 6 (``block="two-layer"``); the μP ResNet (``scaling="mup"``) and
    μP MLP (``"mlp"``) are the Figure 4 baselines, and ``scaling="standard"`` (with
    ``regime="kernel"``) the standard parametrization, one torch lr η_c for every
    weight stored as N(0, 1/fan-in) (:class:`validation.ResNetEnsemble`). Backprop is eq. 3 / 24, by hand,
    with the forward weights (``backward="coupled"``) or an independent copy W̃
    that receives the same updates (``"decoupled"``, Corollary 1) — the network
    whose n → ∞ limit at depth L is ``nfd.simulate(..., depth=L)``. Updates are
    those of appendix E; see :mod:`validation.networks._models` for every formula.

    Regimes (footnote 2): ``"feature"``: α = 1/√n, η = η_c n (Theorem 1);
    ``"kernel"``: α = 1, η = η_c (so that one step moves f by O(η_c) in both).

    The optimizer is exactly ``torch.optim.SGD`` on all parameters (U, every W_ℓ, v)
    of f = (α/√n)vᵀh_L/γ₀, with ``lr`` = η_c(k)·γ₀²/α² at step k (times √L for
    W_{ℓ,1} under ``first_layer_lr="depth-aware"``), ``momentum`` = β,
    ``weight_decay`` = λα²/γ₀², dampening 0, no Nesterov (issue 22; the scalars
    of :class:`nfd.schema.SGDRun`). At the defaults this is plain SGD at η = η_c/α².
    With ``optimizer=nfd.Adam(...)`` / ``nfd.AdamW(...)`` it is exactly ``torch.optim.Adam`` /
    ``AdamW`` in the depth-μP parametrization of Tensor Programs VI (Def. 6.1,
    Table 1; :class:`nfd.schema.AdamRun`, issue 34) on the pre-activation network of
    eq. 1 in the feature regime, f = Vᵀh_L/n, with ``betas`` and one param group
    per row of that class's table (U and V at lr η_c(k) with eps ε/n, every W_ℓ at
    lr η_c(k)·√(T/(Ln)) with eps ε·√(T/L)/n^{3/2}; AdamW's weight_decay λ, and
    λ/√(T/(Ln)) on W).

    The scaled gradients g_ℓ = γ₀(√n/α)∂f/∂h_ℓ keep g_L = v, so ``g2`` is the
    limit's E[g²] for every γ₀.

    On CPU the run sizes torch's thread team to the cores other processes leave free,
    as ``nfd.simulate`` does (``sde.ThreadTeam``; your ``OMP_NUM_THREADS`` or
    ``torch.set_num_threads`` wins), and its numbers are the same on any number of
    threads: the passes run on one thread, the weight updates on the team.

    Parameters
    ----------
    X : array (K·B, d)
        Input stream, consumed B rows per step, in order.
    y : array (K·B,) or (K·B, C)
        Targets, as for :func:`nfd.simulate`: values (K·B,), C ≥ 2 outputs
        (K·B, C) with ``loss="mse"``, or integer class labels (K·B,) with
        ``loss="cross_entropy"``. With C ≥ 2 the network has a readout V (n, C)
        (:class:`validation.ResNetEnsemble`, ``outputs``).
    width, depth : int
        n and L.
    activation, loss
        Names or callables (see :func:`nfd.get_activation`, :func:`nfd.get_loss`);
        ``loss="logistic"`` needs labels ±1, ``"cross_entropy"`` integer labels.
    eta_c : float, sequence of K floats or callable
        η_c ≥ 0 (required: stability needs roughly η_c < 2/K(x, x) with K the
        per-sample tangent kernel, e.g. η_c ≲ 0.4 for relu, mse, T = 1). A
        sequence gives η_c(k) for each of the K steps (step k uses ``eta_c[k]``), a
        callable k → η_c(k) is evaluated at k = 0..K−1 (a schedule: warm-up,
        cosine, …).
    optimizer : nfd.SGD, nfd.Adam or nfd.AdamW
        ``torch.optim.SGD`` (the default ``nfd.SGD()``), or ``torch.optim.Adam`` /
        ``AdamW`` in the groups of the table above (only for the one-layer
        pre-activation depth-μP network in the feature regime; two state buffers and
        a dense gradient per parameter). ``nfd.SGD(momentum=β, weight_decay=λ)``:
        β in [0, 1) (dampening 0, no Nesterov; one buffer per parameter), torch's
        ``weight_decay`` λα²/γ₀² (λ/(γ₀²n) in the feature regime), so that
        lr·weight_decay = η_c(k)·λ; with ``backward="decoupled"`` the copy W̃ decays
        too: W̃ − W = a_k (W̃⁽⁰⁾ − W⁽⁰⁾), a_k of :meth:`nfd.schema.SGDRun.weight_scales`.
        ``nfd.Adam(betas, eps)`` / ``nfd.AdamW(betas, eps, weight_decay)``: (β₁, β₂)
        in [0, 1) (default torch's (0.9, 0.999)), ε ≥ 0 in the rescaled units of the
        table (default 1e-8), AdamW's λ the decoupled decay of the table (each step
        shrinks every parameter by 1 − η_c(k)·λ, and W̃ − W alike: a_k of
        :meth:`nfd.schema.AdamRun.weight_scales`).
    parametrization : nfd.Parametrization
        The network (default depth-μP, :class:`nfd.Parametrization`; presets
        :meth:`~nfd.Parametrization.complete_p`, :meth:`~nfd.Parametrization.mup`,
        :meth:`~nfd.Parametrization.standard`, :meth:`~nfd.Parametrization.tp6`, …):
        ``T`` (branch scale √(T/L)); ``gamma0`` γ₀ > 0, the feature-learning
        strength (f = (α/√n)vᵀh_L/γ₀, lr ∝ γ₀²; SGD only); ``style``, ``block``,
        ``scaling``, ``regime``, ``first_layer_lr`` (see
        :class:`validation.ResNetEnsemble`; ``style`` defaults to ``"post"`` for
        ``block="post-nonlin-ms"``, else ``"pre"``); ``hidden_lr``, Adam's hidden
        rate: the table's (default), or Tensor Programs VI's "block multiplier only"
        baseline, every W_ℓ at lr η_c(k)·√(T/n) (√L times the table's;
        :class:`nfd.schema.AdamRun`); ``branch_exponent`` α ∈ [½, 1]: branch
        (T/L)^α/√n and the hidden rate that keeps each layer's update Θ(T/L)
        (pre-activation depth-μP networks; with ``block="post-nonlin-ms"`` any
        α ≥ 0, paper 001's α, §6.3); ``trainable``, the parameters that learn (must
        contain "W"); ``block_multiplier``, ``layernorm``, ``lr_exponent``:
        ``block="post-nonlin-ms"`` only (Tensor Programs VI, paper 001 §6.3): the
        block multiplier a (§10.2), pre-LayerNorm (Fig. 12) and paper 001's γ
        (Def. 6.2); see :class:`validation.ResNetEnsemble` and the guide's page on
        this block for the table between γ and ``hidden_lr``.
    classes : int, optional
        C ≥ 2 for ``loss="cross_entropy"`` (default: the largest label + 1).
    backward : {"coupled", "decoupled"}
        See :class:`validation.ResNetEnsemble`.
    seeds : int or sequence of int
        S (meaning seeds 0..S−1) or the seeds themselves; trained at once.
    batch_size : int
        B samples per step; the gradient is the batch mean.
    n_steps : int, optional
        K; default ``len(X) // batch_size`` (then ``len(X)`` must be a multiple
        of ``batch_size``).
    record : nfd.Record
        ``probes`` (X_probe (P, d), y_probe (P,) or (P, C)): inputs evaluated
        forward-only with the parameters after each of ``probe_steps`` (in [0, K];
        default, as ``nfd.simulate``: ``nfd.schema.default_steps(K,
        DEFAULT_PROBE_STEPS, True)``, 17 evenly spaced steps including 0 and K, every
        step when K ≤ 16); ``eig_steps`` (in [0, K−1]): steps at which the smallest
        eigenvalues of the empirical Σ and Θ are recorded (Figure 6), which costs
        storing (max(eig_steps)+1)·B trajectories of every layer, so the default is
        none (``nfd.simulate`` defaults to 5); ``collapse``: two-layer blocks,
        record the collapse observables of eq. 27, 33–34 (two extra matrix products
        per block and step; default on). ``paths`` is the limit's (0 here).
    device : str or torch.device, optional
        Default: CUDA when available, else CPU.
    dtype : torch.dtype or str, optional
        Default float32.
    progress : bool
        Show a tqdm progress bar (default ``nfd.schema.DEFAULT_PROGRESS``, as
        ``nfd.simulate``).
    divergence : float or None
        Stop with ``FloatingPointError`` once ‖h_ℓ‖²/n or ‖g_ℓ‖²/n of a network
        exceeds ``divergence`` times its largest value over ℓ at step 0, or f² the
        product of both (:class:`nfd.schema.DivergenceGuard`); probe passes are held
        to their first evaluation the same way. ``None``: stop on NaN/inf only.
        The output check is on γ₀f (f² ≤ h²·g²/γ₀² for every γ₀, so a small γ₀
        is not mistaken for divergence), and the f² it reports is (γ₀f)².
    check_memory : bool
        Raise ``MemoryError`` before allocating more than is available.

    Returns
    -------
    xarray.Dataset
        Variables named and annotated (``long_name``, ``units``) as in
        :data:`nfd.schema.VARIABLES` / ``EXTRA_VARIABLES``. Dimensions ``seed, step, sample, time, probe, probe_step, eig_step,
        block_time``. Variables:

        * ``f``, ``loss``, ``dloss`` (seed, step, sample): output on the step-k
          batch with the parameters after k updates, ℒ(f, y) and χ = ℒ'(f, y);
          ``y`` (step, sample).
        * ``h2``, ``g2`` (seed, step, time): ‖h_ℓ‖²/n and ‖g_ℓ‖²/n at step k,
          averaged over the batch, ``time`` = t_ℓ = ℓT/L, ℓ = 0..L.
        * ``probe_f``, ``probe_loss`` (seed, probe_step, probe), ``probe_y``
          (probe) — empty dimensions without ``probes``.
        * ``sigma_min_eig``, ``theta_min_eig`` (seed, eig_step, time) — empty
          without ``eig_steps``: smallest eigenvalue of [⟨z_ℓ⁽ⁱ⁾, z_ℓ⁽ʲ⁾⟩/n] and
          [⟨g_ℓ⁽ⁱ⁾, g_ℓ⁽ʲ⁾⟩/n] over all training samples i, j of steps 0..eig_step,
          where z_ℓ is the input of the next weight matrix: φ(h_ℓ) (pre-activation
          one-layer blocks and MLP; the Σ of Definition 1), h_ℓ (post-activation
          and two-layer blocks). NaN at ℓ = L for Σ.
        * ``internal_update``, ``residual_update`` (seed, step, block_time) — two-
          layer blocks with ``record_collapse``: batch means of eq. 27 and
          eq. 33–34 (see :meth:`ResNetEnsemble.collapse_observables`),
          ``block_time`` = t_ℓ, ℓ = 1..L.

        ``attrs`` hold every parameter (netCDF-serializable, the keys of
        ``nfd.simulate`` where shared; ``model="network"``), with ``optimizer``
        and the optimizer's :meth:`nfd.schema.SGDRun.attrs`: ``eta_c`` (the constant
        or a schedule's peak), ``eta_c_schedule``, ``momentum``, ``weight_decay``,
        ``gamma0`` (Adam: :meth:`nfd.schema.AdamRun.attrs`, with ``betas`` and
        ``eps``); ``learning_rate_value`` is torch's lr at that ``eta_c``,
        ``weight_decay_value`` torch's weight_decay (Adam: W's group's, with
        ``eps_value``, and U's and V's as ``learning_rate_U_value``,
        ``eps_V_value``, …).

    Warns
    -----
    UserWarning
        Once, when the inputs' mean ‖x‖²/d is far from 1 (the sphere convention the
        documented η_c ranges assume).

    Raises
    ------
    TypeError, ValueError
        Bad arguments (naming the argument), e.g. labels other than ±1 with
        ``loss="logistic"``, a schedule of the wrong length or with a negative or
        NaN entry, ``momentum`` outside [0, 1), a negative ``weight_decay``,
        ``gamma0`` ≤ 0 (the specifications' own checks); with Adam, ``gamma0`` ≠ 1,
        ``betas`` outside [0, 1), ``eps`` < 0, or a network other than the one-layer
        pre-activation depth-μP network in the feature regime; a removed keyword
        (``momentum=``, ``block=``, ``probes=``, …) raises ``TypeError`` naming the
        new form.
    MemoryError
        When the estimate of :func:`validation.network_memory_estimate` does not fit.
    FloatingPointError
        A diverging or non-finite run, naming the step (or probe evaluation), the
        layer, the quantity and the seeds.
    """
    run = check_train(
        X, y, width=width, depth=depth, activation=activation, loss=loss, eta_c=eta_c,
        optimizer=optimizer, parametrization=parametrization, backward=backward,
        seeds=seeds, batch_size=batch_size, n_steps=n_steps, record=record, device=device,
        dtype=dtype, divergence=divergence, classes=classes)
    if check_memory:
        ensure_network_fits(_estimate(run), run.device, what="train_resnet")
    net = ResNetEnsemble(run.d, seeds=run.seeds, device=run.device, dtype=run.dtype,
                         check_memory=False, **run.net)
    rec, eig = Records(run), EigenHistory(run)
    _train(run, net, rec, eig, progress)
    return to_dataset(run, net, rec, eig)


def _estimate(run: TrainRun) -> dict[str, int]:
    """:func:`network_memory_estimate` of the run."""
    return network_memory_estimate(
        run.d, width=run.net["width"], depth=run.net["depth"], seeds=len(run.seeds),
        batch_size=run.B, n_steps=run.K, backward=run.net["backward"],
        block=run.net["block"], style=run.net["style"], record_collapse=run.collapse,
        n_probes=run.Q, n_probe_steps=len(run.probe_steps), eig_history=run.eig_history,
        n_eig_steps=len(run.eig_steps), momentum=run.opt.momentum,
        optimizer=run.net["optimizer"], dtype=run.dtype, outputs=run.C)


def _train(run: TrainRun, net: ResNetEnsemble, rec: Records, eig: EigenHistory,
           progress: bool) -> None:
    """K SGD steps on the stream, probes evaluated before step k (after k updates)
    and after the last step; one divergence check per step and probe evaluation."""
    kw = dict(device=run.device, dtype=run.dtype)
    X = torch.as_tensor(run.X, **kw)
    Y = (torch.as_tensor(run.y, device=run.device) if run.loss.labels
         else torch.as_tensor(run.y, **kw)).reshape((run.K, run.B) + run.y.shape[1:])
    Xp = None if run.probes is None else torch.as_tensor(run.probes[0], **kw)
    guard = DivergenceGuard(run.divergence, run.input_scale, seeds=run.seeds,
                            momentum=run.opt.momentum)
    probe_guard = DivergenceGuard(run.divergence, run.input_scale, seeds=run.seeds,
                                  momentum=run.opt.momentum)

    def probe(k: int) -> None:
        if rec.probes_at(k):
            pf, h2 = net.evaluate(Xp)
            probe_guard.check(k, h2, None, _unscaled(net, pf), phase="probe evaluation at step")
            rec.store_probe(k, pf)

    # Each step runs on one thread but for its weight updates, which get the team
    # (sized to the cores other processes leave free): the same bits on any team
    # (validation.networks._base, "Threads").
    with torch.no_grad(), ThreadTeam(run.device) as team:
        for k in tqdm(range(run.K), disable=not progress, desc="train_resnet"):
            team.tick()
            with serial():
                probe(k)
                sgd_step(net, run.loss, X[k * run.B:(k + 1) * run.B], Y[k], k=k, rec=rec,
                         eig=eig, guard=guard, eta_c=float(run.opt.eta_c[k]))
        with serial():
            probe(run.K)


def sgd_step(net: ResNetEnsemble, loss: nfd.Loss, xb: torch.Tensor, yb: torch.Tensor, *,
             k: int, rec: Records, eig: EigenHistory, guard: DivergenceGuard,
             eta_c: float | None = None) -> None:
    """SGD step k of appendix E on the batch (xb, yb) at η_c(k) = ``eta_c``: forward,
    χ = ℒ'(f, y), backward, update; then record and check it (one host
    synchronisation)."""
    fp = net.forward_pass(xb)
    yb = expand_targets(yb, fp.f, loss)
    chi = loss.grad(fp.f, yb)
    grads = net.backward_pass(fp, chi)
    net.apply_update(grads, eta_c)
    h2, g2 = mean_square(fp.h), mean_square(grads.g)
    value = loss.per_sample(fp.f, yb) if net.C > 1 else loss(fp.f, yb)
    rec.store_step(k, fp, value, chi, h2, g2)
    guard.check(k, h2, g2, _unscaled(net, fp.f),
                phase=f"{OPTIMIZER_TITLES[net.optimizer]} step")
    eig.record(k, net, fp, grads)


def _unscaled(net: ResNetEnsemble, f: torch.Tensor) -> torch.Tensor:
    """γ₀f = (α/√n)vᵀh_L, the output whose scale the divergence guard bounds by
    E[h²]·E[g²] (f itself at γ₀ = 1)."""
    return f if net.gamma0 == 1 else f * net.gamma0


def init_increments(
    x,
    *,
    width: int,
    depth: int,
    activation: str | nfd.Activation | Callable = "relu",
    T: float = 1.0,
    seeds: int | Sequence[int] = 1,
    backward: str = "coupled",
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
) -> xr.Dataset:
    """Per-layer features, gradients and normalized noise increments at initialization.

    For the pre-activation network of eq. 1 (depth-μP, same seeds and so the same
    weights as :func:`train_resnet`) on one input x, returns the normalized
    increments

        ξ_ℓ = W_ℓ φ(h_{ℓ−1}) / ‖φ(h_{ℓ−1})‖,     ξ̃_ℓ = W̃_ℓᵀ g_ℓ / ‖g_ℓ‖,

    (W̃ = W when coupled), so that exactly

        h_ℓ = h_{ℓ−1} + √τ σ_ℓ ξ_ℓ,      g_{ℓ−1} = g_ℓ + √τ σ̃_ℓ φ'(h_{ℓ−1}) ⊙ ξ̃_ℓ,

    τ = T/L, σ_ℓ = ‖φ(h_{ℓ−1})‖/√n, σ̃_ℓ = ‖g_ℓ‖/√n: the Euler–Maruyama steps of
    the forward SDE (Prop. 2/3) and backward SDE (Prop. 6) driven by the network's
    own noise √τ ξ_ℓ — the synchronous coupling of appendix C. Each coordinate of
    ξ_ℓ is N(0, 1) given the past (W_ℓ is fresh); so is ξ̃_ℓ with
    ``backward="decoupled"`` (W̃_ℓ is independent of everything g_ℓ depends on).
    With ``"coupled"`` ξ̃_ℓ is correlated with the forward pass through W_ℓ (the
    GIA holds only as n → ∞).

    Parameters
    ----------
    x : array (d,) or (1, d)
        One input.
    width, depth, activation, T, seeds, backward, device, dtype
        As in :func:`train_resnet`.

    Returns
    -------
    xarray.Dataset
        ``h``, ``g`` (seed, time, width) for ℓ = 0..L; ``xi``, ``xi_tilde``
        (seed, layer, width) and ``sigma``, ``sigma_tilde`` (seed, layer) for
        ℓ = 1..L; ``f`` (seed).
    """
    xn = check_matrix("x", x)
    if xn.shape[0] != 1:
        raise ValueError(f"x must be a single input of shape (d,) or (1, d), got {xn.shape}")
    model = ResNetEnsemble(
        xn.shape[1], width=width, depth=depth, activation=activation, T=T, seeds=seeds,
        backward=backward, device=device, dtype=dtype,
    )
    n, L = model.n, model.L
    with torch.no_grad(), serial():  # the same bits on any thread count
        out = model.propagate(xn)
        H, G = out["h"][:, :, 0], out["g"][:, :, 0]  # (S, L+1, n)
        Z = model.act.phi(H[:, :L])  # (S, L, n)
        Wf = model.W  # (S, L, n, n)
        Wb = model.backward_weights("W")
        zn = torch.linalg.vector_norm(Z, dim=-1, keepdim=True)
        gn = torch.linalg.vector_norm(G[:, 1:], dim=-1, keepdim=True)
        xi = (Wf @ Z.unsqueeze(-1)).squeeze(-1) / zn
        xit = (Wb.mT @ G[:, 1:].unsqueeze(-1)).squeeze(-1) / gn
    times = np.arange(L + 1) * (model.T / L)
    ds = xr.Dataset(
        {
            "h": (("seed", "time", "width"), as_numpy(H)),
            "g": (("seed", "time", "width"), as_numpy(G)),
            "xi": (("seed", "layer", "width"), as_numpy(xi)),
            "xi_tilde": (("seed", "layer", "width"), as_numpy(xit)),
            "sigma": (("seed", "layer"), as_numpy(zn[..., 0]) / math.sqrt(n)),
            "sigma_tilde": (("seed", "layer"), as_numpy(gn[..., 0]) / math.sqrt(n)),
            "f": (("seed",), as_numpy(out["f"][:, 0])),
        },
        coords={"seed": np.asarray(model.seeds, dtype=np.int64), "time": times,
                "layer": np.arange(1, L + 1), "width": np.arange(n)},
        attrs={"source": "validation.init_increments", "width": n, "depth": L,
               "T": model.T, "activation": model.act.name, "backward": model.backward,
               "seeds": [int(s) for s in model.seeds], "tau": model.T / L},
    )
    return ds
