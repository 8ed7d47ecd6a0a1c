"""The interface every finite ResNet ensemble shares: argument checks, parameters,
seeds, and the per-step API ``forward_pass`` → ``backward_pass`` → ``apply_update``
(appendix E of paper 002); the architectures fill in their blocks.

An architecture (one subclass per module: ``_preact``, ``_postact``,
``_twolayer``) registers itself with its ``style`` and ``block`` and provides

* ``_embed(X, fp)``: h_0 from the inputs;
* ``_block(l, h, fp)``: h_{ℓ+1} from h_ℓ (``fp`` is ``None`` for a forward-only pass,
  else the :class:`ForwardPass` whose buffers it fills);
* ``_block_backward(l, fp, G, w)``: writes g_ℓ into ``G[l]`` from g_{ℓ+1} and returns
  the layer's gradients as :class:`RankUpdate` s by family;
* ``_input_gradient(fp, g0)``: (√n/α) ∂f/∂(Ux/√d) from g_0;
* ``layer_inputs(fp)``: the input z_ℓ of each block's first weight matrix.

Threads. Every pass runs on one torch thread (``sde.serial``): MKL splits the
products of a pass (a reduction over the width) differently on 1, 2 or 3 threads at
many shapes (one seed, batch 5, odd widths, float64), so the last bits of f moved
with the thread count. :meth:`apply_update` gives the thread count back
(``sde.parallel``) to the rank-B weight updates and the optimizers' elementwise
steps, which gave the same bits on 1 to 4 threads at every shape tried (seeds 1–8,
batch 1–16, widths 255–4096, float32 and float64). Inside
:func:`validation.train_resnet` that count is a team sized to the cores other
processes leave free (``sde.ThreadTeam``); the numbers are the same on any count.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch

import nfd
from sde import parallel, serial
from nfd.schema import (
    BLOCKS as LIMIT_BLOCKS,
    FIRST_LAYER_RATES,
    MS_BLOCK,
    PARAMETERS,
    AdamRun,
    SGDRun,
    Parametrization,
    check_choice,
    check_int,
    check_matrix,
    check_positive_float,
    check_outputs,
    check_optimizer,
    check_parametrization,
    block_style,
    check_targets,
    resolve_device_dtype,
    scale_step,
)

from ._adam import check_adam_network, torch_adam
from ._memory import ensure_network_fits, network_memory_estimate
from ._scaling import SCALINGS, Stream, make_stream
from ._step import ForwardPass, Gradients, RankUpdate, mean_square
from ._tp6 import check_ms_options, check_ms_parametrization

__all__ = ["ResNetEnsemble", "resolve_seeds", "expand_targets", "STYLES", "BLOCKS", "BACKWARDS", "REGIMES",
           "FIRST_LAYER_LRS", "SCALINGS"]

STYLES = ("pre", "post")
# The blocks of the limits (nfd.schema.BLOCKS, whose ``#:`` comment documents this same
# tuple), Tensor Programs VI's post-nonlinearity block with Mean Subtraction among them.
BLOCKS = LIMIT_BLOCKS
BACKWARDS = ("coupled", "decoupled")
REGIMES = ("feature", "kernel")
FIRST_LAYER_LRS = FIRST_LAYER_RATES


def resolve_seeds(seeds: int | Sequence[int]) -> list[int]:
    """Seeds as a list of distinct non-negative ints.

    ``seeds=S`` (an int) means ``[0, 1, …, S−1]``; a sequence is taken as given.

    Raises
    ------
    TypeError, ValueError
        Naming ``seeds``.
    """
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        count = check_int("seeds", seeds, 1)
        return list(range(count))
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(
            f"seeds must be an int count or a sequence of ints, got {type(seeds).__name__}"
        )
    out = []
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError(f"seeds must contain ints, got {type(s).__name__}")
        if s < 0:
            raise ValueError(f"seeds must be non-negative, got {int(s)}")
        out.append(int(s))
    if not out:
        raise ValueError("seeds must not be empty")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct, got {out}")
    return out


def expand_targets(y: torch.Tensor, f: torch.Tensor, loss: nfd.Loss) -> torch.Tensor:
    """Targets y of a batch broadcast to the seeds of the outputs f (S, B[, C]):
    class labels (B,) to (S, B), values to the shape of f."""
    return y.expand(f.shape[:-1]) if loss.labels else y.expand_as(f)


_expand = expand_targets


def check_architecture(style: str, block: str, scaling: str) -> tuple[str, str, str]:
    """Check that (style, block, scaling) names a network of eq. 1, 6 or 9 of paper
    002, or paper 001 §6.3's block (``style="post"``, ``scaling="depth-mup"``)."""
    check_choice("style", style, STYLES)
    check_choice("block", block, BLOCKS)
    check_choice("scaling", scaling, SCALINGS)
    if block == MS_BLOCK and style != "post":
        raise ValueError(f"block={MS_BLOCK!r} is a post-nonlinearity block (paper 001 "
                         f"§6.3); use style='post' or leave style out, got style={style!r}")
    if block == MS_BLOCK and scaling != "depth-mup":
        raise ValueError(f"block={MS_BLOCK!r} with scaling={scaling!r}: its depth scaling "
                         "is set by branch_exponent and lr_exponent (paper 001's alpha, "
                         "gamma; alpha=0 with lr_exponent=1 is its standard "
                         "parametrization); use scaling='depth-mup'")
    if block == "two-layer" and style != "pre":
        raise ValueError("style='post' is only available with block='one-layer' (eq. 9)")
    if block == "two-layer" and scaling == "mlp":
        raise ValueError("scaling='mlp' is only available with block='one-layer'")
    return style, block, scaling


def check_standard_network(scaling: str, regime: str, gamma0: float,
                           first_layer_lr: str) -> None:
    """The standard parametrization is one torch lr on weights N(0, 1/fan-in) read out
    by f = vᵀh_L: refuse what would break that (the feature regime's 1/n readout, a
    γ₀ ≠ 1 that rescales f and the lr, eq. 8's √L on W_{ℓ,1}) rather than build a
    hybrid."""
    if scaling != "standard":
        return
    if regime != "kernel":
        raise ValueError(f"scaling='standard' with regime={regime!r}: the standard "
                         "parametrization reads out f = v^T h_L/sqrt(n) (alpha = 1); pass "
                         "regime='kernel' (eta_c is then torch's lr of the standard "
                         "network, whose weights are N(0, 1/fan-in))")
    if gamma0 != 1.0:
        raise ValueError(f"scaling='standard' with gamma0={gamma0!r}: gamma0 rescales f "
                         "and the lr away from one torch lr; use gamma0=1")
    if first_layer_lr != "depth-mup":
        raise ValueError(f"scaling='standard' with first_layer_lr={first_layer_lr!r}: the "
                         "standard parametrization has one lr for every weight; use "
                         "first_layer_lr='depth-mup'")


def check_network_parametrization(branch_exponent, trainable, *, style: str, block: str,
                                  scaling: str) -> Parametrization:
    """``branch_exponent`` and ``trainable`` of a network: α ≥ 0 for
    :data:`nfd.schema.MS_BLOCK` (:func:`._tp6.check_ms_parametrization`), else
    :func:`nfd.schema.check_parametrization` and :func:`check_branch_network`."""
    if block == MS_BLOCK:
        return check_ms_parametrization(branch_exponent, trainable)
    param = check_parametrization(branch_exponent, trainable, block)
    check_branch_network(param, style=style, scaling=scaling)
    return param


def check_branch_network(param: Parametrization, *, style: str, scaling: str) -> None:
    """Refuse a branch exponent α ≠ ½ on a network other than the pre-activation
    depth-μP one it is derived for (``nfd._model._depth``; two-layer blocks are refused by
    :func:`nfd.schema.check_parametrization`)."""
    if param.branch_exponent == 0.5:
        return
    for name, value, want in (("style", style, "pre"), ("scaling", scaling, "depth-mup")):
        if value != want:
            raise ValueError(f"branch_exponent={param.branch_exponent!r} with {name}={value!r}: "
                             "the branch exponent is defined for the pre-activation "
                             f"depth-muP network of eq. 1; use {name}={want!r} or "
                             "branch_exponent=0.5")


class ResNetEnsemble(ABC):
    """S finite depth-μP ResNets (eq. 1, 6, 9 of paper 002) trained at once.

    ``ResNetEnsemble(...)`` builds the architecture that ``style`` and ``block``
    name (:class:`validation.networks._preact.PreActResNet`, ``PostActResNet``,
    ``TwoLayerResNet``); ``scaling`` picks its residual stream
    (:mod:`validation.networks._scaling`). See :mod:`validation.networks._models` for
    every formula.

    Parameters
    ----------
    input_dim : int
        d.
    width, depth : int
        n and L (number of residual blocks / hidden weight matrices).
    activation : str, nfd.Activation or callable
        φ (see :func:`nfd.get_activation`).
    T : float
        Time horizon; the depth-μP branch scale is √(T/L).
    seeds : int or sequence of int
        An int S means seeds 0..S−1. Seed s initializes network s from its own
        ``torch.Generator`` (draw order U, v, W layer by layer, then the backward
        copy), so an ensemble equals its members trained one at a time, and the
        coupled and decoupled networks of one seed share U, v and W.
    backward : {"coupled", "decoupled"}
        True gradient (eq. 3) or GIA-decoupled backward (Corollary 1).
    style : {"pre", "post"}
        Pre-activation (eq. 1, the default) or post-activation (eq. 9) residual
        stream; an architecture class defaults to its own, and
        ``block="post-nonlin-ms"`` to ``"post"``.
    block : {"one-layer", "two-layer", "post-nonlin-ms"}
        Eq. 1 (the default), the two-layer residual block of eq. 6 (pre style only),
        or Tensor Programs VI's post-nonlinearity block with Mean Subtraction
        (paper 001 §6.3, :class:`validation.networks._postnonlin.PostNonlinMSResNet`):
        h_0 = Ux/√d, h_ℓ = h_{ℓ−1} + a·(T/L)^α·MS(φ(W_ℓ h_{ℓ−1}/√n)),
        MS(p) = p − ⟨p, 1⟩/n, f = vᵀh_L/n; ``scaling="depth-mup"`` and
        ``regime="feature"`` only, SGD, Adam and AdamW (rates: :mod:`validation.networks._tp6`).
    scaling : {"depth-mup", "mup", "mlp", "standard"}
        Branch scale √(T/L) (depth-μP), √T (μP ResNet), an MLP without skips, or
        the standard parametrization (``"standard"``, with ``regime="kernel"``):
        branch √T, f = vᵀh_L/√n, and one torch lr η_c on weights stored as
        N(0, 1/fan-in) (here N(0, 1) weights, each family at lr η_c·fan-in, weight
        decay λ/fan-in: :meth:`lr_mult`), with no width or depth scaling. It is
        the control that should not transfer across width or depth (Tensor
        Programs VI, Fig. 10 bottom).
    regime : {"feature", "kernel"}
        α = 1/√n with η = η_c n, or α = 1 with η = η_c (footnote 2).
    eta_c : float
        Width-independent learning-rate constant η_c ≥ 0: the learning rate of
        every step unless :meth:`apply_update` / :meth:`sgd_step` get their own
        (a schedule, as :func:`validation.train_resnet` passes); settable.
    optimizer : {"sgd", "adam", "adamw"}
        ``torch.optim.SGD`` (the default; ``momentum``, ``weight_decay``,
        ``gamma0`` below), or exactly ``torch.optim.Adam`` / ``AdamW`` in the
        depth-μP parametrization of Tensor Programs VI (Def. 6.1, Table 1;
        :class:`nfd.schema.AdamRun`), on the stored U, W (one (L, S, n, n) tensor) and
        V, one param group per row of that class's table (U and V at lr η_c(k)
        with eps ε/n, every W_ℓ at lr η_c(k)·√(T/(Ln)) with eps ε·√(T/L)/n^{3/2};
        AdamW's weight_decay λ, and λ/√(T/(Ln)) on W).

        Adam needs the network it is derived for: ``style="pre"``,
        ``block="one-layer"``, ``scaling="depth-mup"``, ``regime="feature"``, and
        ``momentum`` = 0, ``gamma0`` = 1, no ``weight_decay`` with ``"adam"``
        (:func:`nfd.schema.check_optimizer`). It keeps two state buffers and a
        dense gradient per parameter.
    momentum : float
        β in [0, 1): ``torch.optim.SGD``'s ``momentum`` (dampening 0, no Nesterov).
        A dense buffer per parameter is allocated when β > 0.
    weight_decay : float
        λ ≥ 0; torch's ``weight_decay`` is λα²/γ₀² (λ/(γ₀²n) in the feature
        regime), so each step decays the weights by η_c(k)·λ.
    gamma0 : float
        γ₀ > 0: f = (α/√n)vᵀh_L/γ₀ and the learning rate is η_c·γ₀²/α². γ₀ = 1
        is the network of paper 002; γ₀ → 0 the lazy (kernel) limit.
    betas : (float, float), optional
        Adam's (β₁, β₂) in [0, 1) (default torch's (0.9, 0.999)); SGD takes none.
    eps : float, optional
        Adam's ε ≥ 0 in the rescaled units of the table (default 1e-8); torch's
        eps of each group is in the table. SGD takes none.
    hidden_lr : {"depth-mup", "block-only"}
        Adam's hidden rate (:class:`nfd.schema.AdamRun`): depth-μP's table, or
        W_ℓ at √L times it (Tensor Programs VI's "block multiplier only"). Adam only.
    branch_exponent : float
        α ∈ [½, 1] (``nfd._model._depth``; pre-activation one-layer depth-μP networks):
        branch s = (T/L)^α/√n, W_ℓ at lr η·(T/L)^{1−2α} under SGD (η·m for Adam's
        table, eps and weight_decay per :meth:`nfd.schema.AdamRun.groups`) and torch
        ``weight_decay`` divided by (T/L)^{1−2α}, so lr·weight_decay = η_c·λ as in
        U and v. ½ (the default) is depth-μP, 1 CompleteP.
        With ``block="post-nonlin-ms"``: paper 001's α (§6.3, Def. 6.2), any α ≥ 0,
        branch a·(T/L)^α (no 1/√n: W acts inside φ), W's rate per ``lr_exponent``.
    trainable : sequence of {"U", "W", "V"}
        The parameters that learn (must contain "W"); U or v left out keeps its
        initial value (``requires_grad=False`` in a torch reference: no update, no
        weight decay, no Adam group).
    block_multiplier : float
        a > 0, the block multiplier of paper 001 §10.2 (Fig. 13); the rates do not
        depend on it. ``block="post-nonlin-ms"`` only.
    layernorm : bool
        LayerNorm without affine (ε = 1e-5) on h_{ℓ−1} before W_ℓ, MS kept: paper
        001 Fig. 12's "preLN". ``block="post-nonlin-ms"`` only.
    lr_exponent : float, optional
        Paper 001's γ (Def. 6.2, eq. 4): W learns at torch lr η_c·n·(T/L)^{γ−α}
        (SGD) or η_c·(T/L)^γ/√n with eps ε·(T/L)^α/n^{3/2} (Adam, AdamW), T the base
        depth; ``None`` keeps nfd's rule (γ = 1 − α, or ``hidden_lr``): the table
        of the guide's page on this block (docs/guide/tp6_block.md).
        ``block="post-nonlin-ms"`` only.
    outputs : int
        C ≥ 1, the number of outputs: f = (α/√n)Vᵀh_L/γ₀ with a readout V of shape
        (n, C), drawn after U as n·C normals (row-major), for vector mse targets and
        ``"cross_entropy"`` (issue 23); C = 1 is the scalar network (v of shape (n,)).
    first_layer_lr : {"depth-mup", "depth-aware"}
        Two-layer blocks: η₁ = η (depth-μP) or η √L (eq. 8).
    record_collapse : bool
        Two-layer blocks: keep W_{ℓ,1}⁽⁰⁾, W_{ℓ,2}⁽⁰⁾ and compute the collapse
        observables of eq. 27 and 33–34 at every stored forward pass.
    tie_backward : bool
        Decoupled network with W̃⁽⁰⁾ := W⁽⁰⁾ (for testing: equals the coupled one).
    device, dtype
        See :func:`nfd.schema.resolve_device_dtype`.
    check_memory : bool
        Compare the weight memory with what is available before allocating.

    Other Parameters
    ----------------
    *args, **kw
        The signature of ``ResNetEnsemble(...)`` is that of ``__new__``, which reads
        only ``style``, ``block`` and ``scaling`` (to pick the architecture class)
        and passes over the others: ``input_dim`` and the keywords above, which
        ``__init__`` takes.

    Attributes
    ----------
    U : Tensor (S, n, d)
    v : Tensor (S, n), or (S, n, C) with C ≥ 2 outputs
    W : Tensor (S, L, n, n)
        One-layer blocks (``W1``, ``W2`` for two-layer blocks).
    alpha, eta, kappa : float
        α, the SGD learning rate η = η_c·γ₀²/α² of W (and U, v) at the attribute
        ``eta_c``, and κ = ηα/√n.
    optimizer : str
        ``"sgd"``, ``"adam"`` or ``"adamw"``.
    momentum, weight_decay, gamma0 : float
        β, λ and γ₀ (above); ``torch_weight_decay`` = λα²/γ₀² (SGD).
    betas, eps
        Adam's (β₁, β₂) and ε (``None`` with SGD); the groups are those of
        :attr:`torch_optimizer`.
    hidden_lr : str
        Adam's hidden-rate rule (``"depth-mup"`` with SGD).
    stream : Stream
        τ, the branch coefficient s and the skip connection.
    """

    #: (style, block) → architecture, filled by ``__init_subclass__``.
    _ARCHITECTURES: ClassVar[dict[tuple[str, str], type]] = {}
    #: Weight families of one block.
    families: ClassVar[tuple[str, ...]] = ("W",)
    #: Extra per-layer buffers of a stored pass: name → number of layers beyond L.
    _layer_buffers: ClassVar[dict[str, int]] = {}
    style: ClassVar[str]
    block: ClassVar[str]

    def __init_subclass__(cls, *, style: str, block: str, **kw) -> None:
        super().__init_subclass__(**kw)
        cls.style, cls.block = style, block
        ResNetEnsemble._ARCHITECTURES[(style, block)] = cls

    def __new__(cls, *args, style: str | None = None, block: str | None = None,
                scaling: str = "depth-mup", **kw):
        if cls is ResNetEnsemble:
            style, block = style or block_style(block), block or "one-layer"
            check_architecture(style, block, scaling)
            cls = ResNetEnsemble._ARCHITECTURES[(style, block)]
        return super().__new__(cls)

    def __init__(
        self,
        input_dim: int,
        *,
        width: int,
        depth: int,
        activation: str | nfd.Activation | Callable = "relu",
        T: float = 1.0,
        seeds: int | Sequence[int] = 1,
        backward: str = "coupled",
        style: str | None = None,
        block: str | None = None,
        scaling: str = "depth-mup",
        regime: str = "feature",
        eta_c: float = 1.0,
        optimizer: str = "sgd",
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        gamma0: float = 1.0,
        betas: tuple[float, float] | None = None,
        eps: float | None = None,
        hidden_lr: str = "depth-mup",
        branch_exponent: float = 0.5,
        trainable: Sequence[str] = PARAMETERS,
        block_multiplier: float = 1.0,
        layernorm: bool = False,
        lr_exponent: float | None = None,
        outputs: int = 1,
        first_layer_lr: str = "depth-mup",
        record_collapse: bool = False,
        tie_backward: bool = False,
        device: str | torch.device | None = None,
        dtype: torch.dtype | str | None = None,
        check_memory: bool = True,
    ) -> None:
        style = self.style if style is None else style
        block = self.block if block is None else block
        if (style, block) != (self.style, self.block):
            raise ValueError(f"{type(self).__name__} is style={self.style!r}, "
                             f"block={self.block!r}; got style={style!r}, block={block!r}")
        self.d = check_int("input_dim", input_dim, 1)
        self.n = check_int("width", width, 1)
        self.L = check_int("depth", depth, 1)
        self.T = check_positive_float("T", T)
        self.C = check_int("outputs", outputs, 1)
        self.eta_c = eta_c
        opt = check_optimizer(optimizer, self.eta_c, 0, momentum=momentum,
                              weight_decay=weight_decay, gamma0=gamma0, betas=betas, eps=eps,
                              hidden_lr=hidden_lr)
        self.optimizer = optimizer
        self.momentum, self.weight_decay, self.gamma0 = (opt.momentum, opt.weight_decay,
                                                         opt.gamma0)
        self.betas, self.eps = (None, None) if optimizer == "sgd" else (opt.betas, opt.eps)
        self.hidden_lr = hidden_lr
        self.act = nfd.get_activation(activation)
        self.seeds = resolve_seeds(seeds)
        self.S = len(self.seeds)
        self.backward = check_choice("backward", backward, BACKWARDS)
        self.scaling = check_architecture(style, block, scaling)[2]
        self.regime = check_choice("regime", regime, REGIMES)
        self.first_layer_lr = check_choice("first_layer_lr", first_layer_lr, FIRST_LAYER_LRS)
        check_standard_network(self.scaling, self.regime, self.gamma0, self.first_layer_lr)
        check_adam_network(optimizer, style=self.style, block=self.block,
                           scaling=self.scaling, regime=self.regime)
        self.block_multiplier, self.layernorm, self.lr_exponent = check_ms_options(
            self.block, block_multiplier=block_multiplier, layernorm=layernorm,
            lr_exponent=lr_exponent, hidden_lr=hidden_lr, regime=self.regime,
            gamma0=self.gamma0)
        self.param = check_network_parametrization(branch_exponent, trainable, style=self.style,
                                                   block=self.block, scaling=self.scaling)
        self.record_collapse = bool(record_collapse) and self.block == "two-layer"
        self.device, self.dtype = resolve_device_dtype(device, dtype)
        self.alpha = 1.0 / math.sqrt(self.n) if self.regime == "feature" else 1.0
        self.stream: Stream = self._make_stream()
        if check_memory:
            self._check_memory()
        self._init_parameters(bool(tie_backward))
        self._init_optimizer(opt)
        self._workspace: dict[str, torch.Tensor] = {}
        self._last: ForwardPass | None = None

    def _check_memory(self) -> None:
        """``MemoryError`` before allocating weights that do not fit
        (:func:`network_memory_estimate`)."""
        parts = network_memory_estimate(
            self.d, width=self.n, depth=self.L, seeds=self.S, n_steps=0,
            backward=self.backward, block=self.block, style=self.style,
            record_collapse=self.record_collapse, momentum=self.momentum,
            optimizer=self.optimizer, dtype=self.dtype, outputs=self.C)
        ensure_network_fits(parts, self.device, what="the ensemble's weights")

    def _make_stream(self) -> Stream:
        """The residual stream of ``scaling`` (:func:`._scaling.make_stream`)."""
        return make_stream(self.scaling, T=self.T, depth=self.L, width=self.n,
                           post_activation=self.style == "post", param=self.param)

    # ------------------------------------------------------------ parameters
    def _init_parameters(self, tie_backward: bool) -> None:
        """Draw U, v, W (and the backward copy) seed by seed, in the documented order."""
        S, L, n, d = self.S, self.L, self.n, self.d
        kw = dict(device=self.device, dtype=self.dtype)
        self._U = torch.empty((S, n, d), **kw)
        C = self.C
        # C ≥ 2: the readout is kept as rows (S, C, n), so that its gradient is one
        # rank-B product like every other weight's
        self._v = torch.empty((S, n) if C == 1 else (S, C, n), **kw)
        self._w = {k: torch.empty((L, S, n, n), **kw) for k in self.families}
        decoupled = self.backward == "decoupled"
        self._dback = {k: torch.empty((L, S, n, n), **kw) for k in self.families} \
            if decoupled else {}
        for i, seed in enumerate(self.seeds):
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed)
            self._U[i].normal_(generator=gen)
            if C == 1:
                self._v[i].normal_(generator=gen)
            else:
                self._v[i].copy_(torch.empty((n, C), **kw).normal_(generator=gen).T)
            for l in range(L):
                for k in self.families:
                    self._w[k][l, i].normal_(generator=gen)
            for l in range(L) if decoupled else ():
                for k in self.families:
                    dk = self._dback[k][l, i]
                    if tie_backward:
                        dk.zero_()
                    else:  # D = W̃⁽⁰⁾ − W⁽⁰⁾ with W̃⁽⁰⁾ i.i.d. N(0, 1)
                        dk.normal_(generator=gen).sub_(self._w[k][l, i])
        self._w0 = {k: w.clone() for k, w in self._w.items()} if self.record_collapse else {}

    def _init_optimizer(self, opt: SGDRun | AdamRun) -> None:
        """Momentum buffers (zero, as torch's first step sets buf = d) when β > 0, the
        ``torch.optim.Adam`` / ``AdamW`` of an Adam run (:func:`._adam.torch_adam`), and
        the decay a_k of the decoupled copy's difference D = W̃ − W, per family."""
        self._momentum: dict[str, torch.Tensor] = {}
        self._adam = None if self.optimizer == "sgd" else torch_adam(
            {"U": self._U, "W": self._w["W"], "V": self._v}, opt, width=self.n,
            depth=self.L, T=self.T, param=self.param)
        if self.momentum > 0:
            self._momentum = {"U": torch.zeros_like(self._U), "v": torch.zeros_like(self._v)}
            self._momentum.update({k: torch.zeros_like(w) for k, w in self._w.items()})
        # D_k = a_k D_0 with (a, p) the θ_0 coefficients of the weights and of the
        # momentum buffer, D_0 = W̃⁽⁰⁾ − W⁽⁰⁾ stored in ``_dback``
        self._decay = {k: (1.0, 0.0) for k in self.families}

    # ------------------------------------------------------------- optimizer
    @property
    def eta_c(self) -> float:
        """η_c of a step that is given none (settable, ≥ 0)."""
        return self._eta_c

    @eta_c.setter
    def eta_c(self, value: float) -> None:
        self._eta_c = check_positive_float("eta_c", value, allow_zero=True)

    def learning_rate(self, eta_c: float | None = None) -> float:
        """torch's ``lr`` of U, v and W at η_c (default: the attribute):
        η = η_c·γ₀²/α² (η_c·γ₀²·n in the feature regime).

        Parameters
        ----------
        eta_c : float, optional
            η_c; default the attribute ``eta_c``. Not checked here.

        Returns
        -------
        float
            η, before a family's :meth:`lr_mult`.
        """
        eta_c = self._eta_c if eta_c is None else eta_c
        return eta_c * self.gamma0**2 / self.alpha**2

    @property
    def eta(self) -> float:
        """η = η_c·γ₀²/α², the learning rate of U, v, W at the attribute ``eta_c``."""
        return self.learning_rate()

    @property
    def kappa(self) -> float:
        """κ = ηα/√n at the attribute ``eta_c`` (η_c·γ₀² in the feature regime)."""
        return self.eta * self.alpha / math.sqrt(self.n)

    @property
    def torch_weight_decay(self) -> float:
        """torch's ``weight_decay`` of SGD, λα²/γ₀² (λ/(γ₀²n) in the feature regime).

        Returns
        -------
        float
            λα²/γ₀², before a family's :meth:`decay_mult` over its :meth:`lr_mult`.
        """
        return self.weight_decay * self.alpha**2 / self.gamma0**2

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer | None:
        """The ``torch.optim.Adam`` / ``AdamW`` that steps U, W, V (param groups named
        ``"U"``, ``"W"``, ``"V"``, each with its ``lr_mult``, ``eps`` and
        ``weight_decay``); ``None`` with SGD, whose update is written out."""
        return self._adam

    def lr_mult(self, name: str) -> float:
        """The learning rate of weight family ``name`` (``"U"``, ``"W"``, ``"W1"``,
        ``"W2"``, ``"V"``) over η: :attr:`lr_mult_first` for W_{ℓ,1} of two-layer
        blocks, (T/L)^{1−2α} for W at a branch exponent α, else 1; times the family's
        fan-in (d for U, n for the others) under ``scaling="standard"``, where one
        torch lr η on weights stored as N(0, 1/fan-in) is lr η·fan-in on the N(0, 1)
        weights kept here (θ = √fan-in·θ_sp, ∂/∂θ = ∂/∂θ_sp/√fan-in).

        Parameters
        ----------
        name : str
            The weight family: ``"U"``, ``"W"``, ``"W1"``, ``"W2"`` or ``"V"`` (any
            name other than ``"W"`` and ``"W1"`` gets the factor 1, times its
            fan-in under ``"standard"``).

        Returns
        -------
        float
            The family's learning rate over η (:meth:`learning_rate`).
        """
        if name == "W":
            mult = self.param.sgd_hidden_mult(self.tau)
        else:
            mult = self.lr_mult_first if name == "W1" else 1.0
        if self.scaling != "standard":
            return mult
        return mult * (self.d if name == "U" else self.n)

    def decay_mult(self, name: str) -> float:
        """lr·weight_decay of family ``name`` over η_c·λ: :meth:`lr_mult` for
        W_{ℓ,1} (eq. 8 scales its whole step), 1 for every other family (the torch
        ``weight_decay`` of W at a branch exponent α, and of every family under
        ``scaling="standard"``, is divided by its lr factor: ``nfd._model._depth``).

        Parameters
        ----------
        name : str
            The weight family: ``"U"``, ``"W"``, ``"W1"``, ``"W2"`` or ``"V"``.

        Returns
        -------
        float
            :attr:`lr_mult_first` for ``"W1"``, else 1.
        """
        return self.lr_mult_first if name == "W1" else 1.0

    @property
    def backward_scale(self) -> dict[str, float]:
        """The scale a_k of the decoupled copy's difference, per weight family.

        After k updates W̃⁽ᵏ⁾ − W⁽ᵏ⁾ = a_k (W̃⁽⁰⁾ − W⁽⁰⁾), a_k of
        :meth:`nfd.schema.SGDRun.weight_scales` (:meth:`nfd.schema.AdamRun.weight_scales`
        with Adam) at the family's learning rates; 1 without weight decay.

        Returns
        -------
        dict of str to float
            a_k by family name (``"W"``, or ``"W1"`` and ``"W2"``), after the updates
            made so far.
        """
        return {k: a for k, (a, _) in self._decay.items()}

    @property
    def tau(self) -> float:
        """The depth step τ of the residual stream.

        Returns
        -------
        float
            T/L (depth-μP), T (μP ResNet), NaN (MLP).
        """
        return self.stream.tau

    @property
    def s(self) -> float:
        """Branch coefficient s of h_ℓ = skip·h_{ℓ−1} + s·branch_ℓ."""
        return self.stream.s

    @property
    def skip(self) -> float:
        """1 with a skip connection, 0 for the μP MLP."""
        return self.stream.skip

    @property
    def lr_mult_first(self) -> float:
        """η₁/η for the first matrix of a block (√L only for depth-aware two-layer
        blocks, eq. 8)."""
        return 1.0

    @property
    def U(self) -> torch.Tensor:
        """Input weights, (S, n, d)."""
        return self._U

    @property
    def v(self) -> torch.Tensor:
        """Readout weights, (S, n), or (S, n, C) (a view) with C ≥ 2 outputs."""
        return self._v if self.C == 1 else self._v.mT

    def _seed_first(self, name: str) -> torch.Tensor:
        if name not in self._w:
            raise AttributeError(f"{name} is not a parameter of a {self.block} network")
        return self._w[name].transpose(0, 1)

    @property
    def W(self) -> torch.Tensor:
        """Hidden weights W_ℓ (one-layer blocks), a (S, L, n, n) view."""
        return self._seed_first("W")

    @property
    def W1(self) -> torch.Tensor:
        """First-layer weights W_{ℓ,1} of two-layer blocks, (S, L, n, n) view."""
        return self._seed_first("W1")

    @property
    def W2(self) -> torch.Tensor:
        """Second-layer weights W_{ℓ,2} of two-layer blocks, (S, L, n, n) view."""
        return self._seed_first("W2")

    def backward_weights(self, name: str = "W") -> torch.Tensor:
        """Weights used in the backward pass, (S, L, n, n): W (coupled) or
        W̃⁽ᵏ⁾ = W⁽ᵏ⁾ + a_k (W̃⁽⁰⁾ − W⁽⁰⁾) (decoupled, a_k of :attr:`backward_scale`);
        a new tensor when decoupled.

        Parameters
        ----------
        name : str
            The hidden weight family: ``"W"`` (one-layer blocks), ``"W1"`` or
            ``"W2"`` (two-layer blocks); another raises ``AttributeError``.

        Returns
        -------
        Tensor, shape (S, L, n, n)
            A view of the stored weights (coupled), or a new tensor (decoupled).
        """
        w = self._seed_first(name)
        if not self._dback:
            return w
        a = self._decay[name][0]
        return w + (self._dback[name] if a == 1.0 else a * self._dback[name]).transpose(0, 1)

    def parameters(self) -> dict[str, torch.Tensor]:
        """Trainable parameters by name, seed axis first (views, not copies)."""
        out = {"U": self._U, "v": self.v}
        out.update({k: self._seed_first(k) for k in self._w})
        return out

    # --------------------------------------------------------------- helpers
    def _as_input(self, X, name: str = "X") -> torch.Tensor:
        """X as a (B, d) tensor on the network's device and dtype."""
        if isinstance(X, torch.Tensor):
            if X.ndim == 1:
                X = X[None]
            if X.ndim != 2 or X.shape[1] != self.d:
                raise ValueError(f"{name} must have shape (B, {self.d}), got {tuple(X.shape)}")
            return X.to(device=self.device, dtype=self.dtype)
        arr = check_matrix(name, X, columns=self.d)
        return torch.as_tensor(arr, device=self.device, dtype=self.dtype)

    def _as_targets(self, y, B: int, loss: nfd.Loss | None = None) -> torch.Tensor:
        """Targets of a batch of B: (B,) values, (B, C) values for C ≥ 2 outputs, or
        (B,) int64 class labels for a ``labels`` loss (``"cross_entropy"``)."""
        if self.C == 1 and isinstance(y, torch.Tensor) and y.shape == (B,) \
                and (loss is None or not loss.labels):
            return y.to(device=self.device, dtype=self.dtype)
        if self.C == 1 and (loss is None or not loss.labels):
            arr = check_targets("y", y, B)
            return torch.as_tensor(arr, device=self.device, dtype=self.dtype)
        arr, C = check_outputs("y", y, B, loss or nfd.get_loss("mse"), outputs=self.C)
        if C != self.C:
            raise ValueError(f"y has {C} outputs but the network has outputs={self.C}")
        dtype = torch.int64 if arr.dtype == np.int64 else self.dtype
        return torch.as_tensor(arr, device=self.device, dtype=dtype)

    def _buffers(self, B: int) -> dict[str, torch.Tensor]:
        """The workspace of a stored pass on B inputs, reused while B stays the same:
        h, g (L+1, S, B, n) and the architecture's ``_layer_buffers``."""
        if self._workspace and self._workspace["h"].shape[2] == B:
            return self._workspace
        shape = (self.S, B, self.n)
        kw = dict(device=self.device, dtype=self.dtype)
        sizes = {"h": 1, "g": 1, **self._layer_buffers}
        self._workspace = {k: torch.empty((self.L + extra,) + shape, **kw)
                           for k, extra in sizes.items()}
        return self._workspace

    def _back_product(self, left: torch.Tensor, name: str, l: int) -> torch.Tensor:
        """Row form of W̃_ℓᵀ·left: left @ W (+ a_k·left @ D_0 for the decoupled copy)."""
        out = torch.bmm(left, self._w[name][l])
        if self._dback:
            a = self._decay[name][0]
            if a == 1.0:
                out.baddbmm_(left, self._dback[name][l])
            else:
                out.baddbmm_(left, self._dback[name][l], alpha=a)
        return out

    def _rank_update(self, left: torch.Tensor, right: torch.Tensor, coef: float,
                     name: str) -> RankUpdate:
        """The gradient coef·(α/(γ₀√n))·leftᵀ right of weight family ``name`` (left
        carries χ_b/B), learning at η·:meth:`lr_mult` (appendix E)."""
        return RankUpdate(left, right, coef * self.alpha / math.sqrt(self.n) / self.gamma0,
                          coef, self.lr_mult(name))

    def _readout(self, h: torch.Tensor) -> torch.Tensor:
        """f = (α/√n) vᵀ h_L / γ₀, (S, B), or (S, B, C) with C ≥ 2 outputs."""
        if self.C > 1:
            f = torch.bmm(h, self._v.mT)
            return f.mul_(self.alpha * (1.0 / math.sqrt(self.n)) / self.gamma0)
        f = torch.bmm(h, self._v.unsqueeze(-1)).squeeze(-1)
        return f.mul_(self.alpha * (1.0 / math.sqrt(self.n)) / self.gamma0)

    def _input_preactivation(self, X: torch.Tensor) -> torch.Tensor:
        """Ux/√d, (S, B, n)."""
        return torch.matmul(X, self._U.mT).mul_(1.0 / math.sqrt(self.d))

    # --------------------------------------------------------- per-step API
    @torch.no_grad()
    @serial()
    def forward_pass(self, X) -> ForwardPass:
        """Forward pass of eq. 1 / 6 / 9 on X (B, d), kept for :meth:`backward_pass`.

        Its buffers are reused by the next ``forward_pass`` on the same batch size.
        Two-layer blocks with ``record_collapse`` also compute the collapse
        observables of eq. 27 and 33–34 (``internal``, ``residual``).

        Parameters
        ----------
        X : array_like or Tensor, shape (B, d)
            The inputs (one input of shape (d,) for a tensor); moved to the network's
            device and dtype.

        Returns
        -------
        ForwardPass
            The inputs, the residual stream h (L+1, S, B, n), the outputs f (S, B)
            ((S, B, C) with C ≥ 2 outputs) and the architecture's extra buffers;
            h and those buffers are the network's workspace, valid until its next
            forward pass on B inputs.
        """
        X = self._as_input(X)
        buf = self._buffers(X.shape[0])
        fp = ForwardPass(X=X, h=buf["h"], u=buf.get("u"), x=buf.get("x"))
        h = self._embed(X, fp)
        for l in range(self.L):
            h = self._block(l, h, fp)
        fp.f = self._readout(h)
        self._last = fp
        return fp

    @torch.no_grad()
    @serial()
    def evaluate(self, X) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward-only pass storing nothing: outputs f (S, B) and the mean square
        features ‖h_ℓ‖²/n averaged over the batch, (L+1, S) (for divergence checks).

        Parameters
        ----------
        X : array_like or Tensor, shape (B, d)
            The inputs.

        Returns
        -------
        f : Tensor, shape (S, B)
            The outputs ((S, B, C) with C ≥ 2 outputs).
        h2 : Tensor, shape (L+1, S)
            ‖h_ℓ‖²/n averaged over the batch, ℓ = 0..L.
        """
        h2 = torch.empty((self.L + 1, self.S), device=self.device, dtype=self.dtype)
        return self._forward_only(self._as_input(X), h2), h2

    def _forward_only(self, X: torch.Tensor, h2: torch.Tensor | None) -> torch.Tensor:
        """f on X without storing the pass; fills ``h2[ℓ]`` with ‖h_ℓ‖²/n when given."""
        h = self._embed(X, None)
        for l in range(self.L + 1):
            if h2 is not None:
                h2[l] = mean_square(h)
            if l < self.L:
                h = self._block(l, h, None)
        return self._readout(h)

    @torch.no_grad()
    @serial()
    def backward_pass(self, fp: ForwardPass, chi: torch.Tensor) -> Gradients:
        """Backward pass (eq. 3 / 24, with W̃ when decoupled) after :meth:`forward_pass`.

        Fills g_ℓ, ℓ = L..0 (g_L = v), and returns the gradient of the batch-mean loss
        ℒ̄ = (1/B) Σ_b ℒ(f_b, y_b) given χ = ℒ'(f, y) (S, B), in factored form. Nothing
        moves: see :meth:`apply_update`.

        With C ≥ 2 outputs χ is (S, B, C) and backprop, linear in the output error,
        starts from the unit direction g_L = Σ_c (χ_c/‖χ‖) v_c of the readout
        columns (Σ_c v_c/√C where χ = 0), each sample's gradients carrying ‖χ‖/B
        (as ``nfd.simulate`` does: the same g2); V's gradient has the C columns
        Σ_b χ_{b,c} h_L^{(b)}/B.

        Parameters
        ----------
        fp : ForwardPass
            The pass of :meth:`forward_pass` on this batch (still the network's
            workspace: no forward pass on B inputs since).
        chi : Tensor, shape (S, B), or (S, B, C) with C ≥ 2 outputs
            χ = ℒ'(f, y), the loss's derivative at every output.

        Returns
        -------
        Gradients
            g_ℓ (L+1, S, B, n), written into the network's workspace, and the
            rank-B factors of the gradients of U, v and every hidden weight matrix.
        """
        S, L, B = self.S, self.L, fp.X.shape[0]
        G = self._buffers(B)["g"]
        if self.C > 1:
            norm = torch.linalg.vector_norm(chi, dim=-1, keepdim=True)  # (S, B, 1)
            direction = torch.where(norm > 0, chi / norm.clamp_min(torch.finfo(chi.dtype).tiny),
                                    1 / math.sqrt(self.C))
            torch.bmm(direction, self._v, out=G[L])
            w = norm / B  # (S, B, 1): ‖χ_b‖ / B
            readout = chi / B  # (S, B, C)
        else:
            G[L].copy_(self._v.unsqueeze(1).expand(S, B, self.n))  # g_L = v
            w = (chi / B).unsqueeze(-1)  # (S, B, 1): χ_b / B
            readout = w
        hidden: dict[str, list[RankUpdate]] = {k: [None] * L for k in self.families}
        for l in range(L - 1, -1, -1):
            for name, term in self._block_backward(l, fp, G, w).items():
                hidden[name][l] = term
        g0 = self._input_gradient(fp, G[0])
        inv_sqrt_d, inv_sqrt_n = 1.0 / math.sqrt(self.d), 1.0 / math.sqrt(self.n)
        Xe = fp.X.unsqueeze(0).expand(S, B, self.d)
        U = RankUpdate(w * g0, Xe, inv_sqrt_d * self.alpha * inv_sqrt_n / self.gamma0,
                       inv_sqrt_d, self.lr_mult("U"))
        v = RankUpdate(readout, fp.h[L], self.alpha * inv_sqrt_n / self.gamma0, 1.0,
                       self.lr_mult("V"))
        return Gradients(g=G, U=U, v=v, hidden=hidden)

    @torch.no_grad()
    def apply_update(self, grads: Gradients, eta_c: float | None = None) -> None:
        """One step of ``torch.optim.SGD`` for every parameter, in place (with
        ``optimizer="adam"`` / ``"adamw"``: of ``torch.optim.Adam`` / ``AdamW``).

        Each parameter θ with gradient ∂ℒ̄/∂θ (``grads``) follows torch's update
        with ``lr`` = η·m, η = η_c·γ₀²/α² (:meth:`learning_rate`), m the family's
        :meth:`lr_mult` (√L for W_{ℓ,1} when ``first_layer_lr="depth-aware"``
        (eq. 8), (T/L)^{1−2α} for W at a branch exponent α, the fan-in under
        ``scaling="standard"``, else 1), ``momentum`` = β, ``weight_decay`` =
        λα²/γ₀² times :meth:`decay_mult`/m, dampening 0, no Nesterov (shown for
        m = 1)::

            d = ∂ℒ̄/∂θ + (λα²/γ₀²) θ,   buf = β buf + d (buf = d at the first step),
            θ ← θ − η m buf.

        Without momentum no buffer exists and θ ← (1 − η_c m λ) θ − η m ∂ℒ̄/∂θ (one
        rank-B GEMM, plus one scaling with weight decay). The decoupled copy W̃
        receives W's gradient and its own weight decay and momentum, so D = W̃ − W
        follows the same update with no gradient: D_k = a_k D_0 (``torch.optim.SGD``
        on D, with the scalar a_k of :meth:`nfd.schema.SGDRun.weight_scales`, tracked
        here and used as the scale of D_0 in the backward product).

        Adam: the batch-mean gradients are written into each parameter's dense
        ``grad``, every group's ``lr`` is set to η_c·``lr_mult`` (the table of
        :class:`ResNetEnsemble`) and torch's optimizer steps. W̃ would receive W's
        gradient, hence W's Adam state, so D = W̃ − W only decays:
        D_k = a_k D_0 with a_k = Π_{s<k} (1 − η_c(s)·λ) (1 for Adam,
        :meth:`nfd.schema.AdamRun.weight_scales`).

        Parameters
        ----------
        grads : Gradients
            From :meth:`backward_pass`.
        eta_c : float, optional
            η_c of this step (a schedule's η_c(k)); default the attribute ``eta_c``.
        """
        eta_c = self._eta_c if eta_c is None else \
            check_positive_float("eta_c", eta_c, allow_zero=True)
        with parallel():  # rank-B and elementwise updates: the same bits on any count
            if self._adam is None:
                self._sgd_update(grads, eta_c)
            else:
                self._adam_update(grads, eta_c)
        for name, (a, p) in self._decay.items():
            self._decay[name] = scale_step(a, p, eta_c * self.decay_mult(name), self.momentum,
                                           self.weight_decay)

    def _sgd_update(self, grads: Gradients, eta_c: float) -> None:
        """torch's SGD step of every parameter at η_c (:meth:`apply_update`)."""
        eta = self.learning_rate(eta_c)
        step = -(eta * self.alpha / math.sqrt(self.n)) / self.gamma0  # −κ/γ₀
        for name, per_layer in grads.hidden.items():
            for l, term in enumerate(per_layer):
                self._update(self._w[name][l], term, name, l, eta_c, eta, step)
        if self.param.trains("U"):
            self._update(self._U, grads.U, "U", None, eta_c, eta, step)
        if not self.param.trains("V"):
            return
        if self.C > 1:
            self._update(self._v, grads.v, "v", None, eta_c, eta, step)
        elif self._momentum or self.weight_decay:
            self._update(self._v.unsqueeze(1), grads.v, "v", None, eta_c, eta, step)
        else:
            self._v.sub_(torch.bmm(grads.v.left.mT, grads.v.right).squeeze(1),
                         alpha=-step * grads.v.lr_mult)

    def _adam_update(self, grads: Gradients, eta_c: float) -> None:
        """torch's Adam / AdamW step of every parameter at η_c (:meth:`apply_update`):
        each dense ``grad`` ← ∂ℒ̄/∂θ (one batched GEMM per matrix), each group's lr
        ← η_c·``lr_mult``; frozen families have no group and no ``grad``."""
        if self.param.trains("U"):
            grads.U.accumulate(self._U.grad, 0.0)
        if self.param.trains("V"):
            V = self._v.grad
            grads.v.accumulate(V if self.C > 1 else V.unsqueeze(1), 0.0)  # as rows (S, C, n)
        W = self._w["W"].grad
        for l, term in enumerate(grads.hidden["W"]):
            term.accumulate(W[l], 0.0)
        for group in self._adam.param_groups:
            group["lr"] = eta_c * group["lr_mult"]
        self._adam.step()

    def _update(self, theta: torch.Tensor, term: RankUpdate, name: str, l: int | None,
                eta_c: float, eta: float, step: float) -> None:
        """torch's SGD step of one (S, m, k) parameter (:meth:`apply_update`); its
        torch ``weight_decay`` is λα²/γ₀² times :meth:`decay_mult` over ``lr_mult``."""
        decay = self.decay_mult(name)
        if self._momentum:
            buf = self._momentum[name]
            buf = (buf.unsqueeze(1) if name == "v" and self.C == 1 else buf if l is None
                   else buf[l])
            term.accumulate(buf, self.momentum)
            if self.weight_decay:
                wd = self.torch_weight_decay
                buf.add_(theta, alpha=wd if decay == term.lr_mult else wd * decay / term.lr_mult)
            theta.sub_(buf, alpha=eta * term.lr_mult)
            return
        if self.weight_decay:
            theta.mul_(1.0 - eta_c * decay * self.weight_decay)
        term.apply_to(theta, step * term.lr_mult * term.coef)

    def layer_inputs(self, fp: ForwardPass) -> torch.Tensor:
        """z_ℓ, ℓ = 0..L−1, (L, S, B, n): the input of block ℓ+1's first weight matrix
        (whose Gram matrix is the empirical Σ of Definition 1 for pre-activation).

        Parameters
        ----------
        fp : ForwardPass
            A pass of :meth:`forward_pass`.

        Returns
        -------
        Tensor, shape (L, S, B, n)
            h_ℓ (a view of ``fp.h``) for post-activation and two-layer blocks;
            φ(h_ℓ), a new tensor, for pre-activation one-layer blocks.
        """
        return fp.h[:self.L]

    # ---------------------------------------------------- convenience API
    @torch.no_grad()
    @serial()
    def forward(self, X) -> torch.Tensor:
        """Outputs f(x) = (α/√n) vᵀ h_L(x) of every network, (S, B) (eq. 1/6/9);
        (S, B, C) with C ≥ 2 outputs.

        Forward only: nothing is stored, nothing trained.

        Parameters
        ----------
        X : array_like or Tensor, shape (B, d)
            The inputs.

        Returns
        -------
        Tensor, shape (S, B), or (S, B, C) with C ≥ 2 outputs
            f of every network on every input (divided by γ₀).
        """
        return self._forward_only(self._as_input(X), None)

    @torch.no_grad()
    @serial()
    def propagate(self, X) -> dict[str, torch.Tensor]:
        """Forward and backward pass without an update.

        Parameters
        ----------
        X : array_like or Tensor, shape (B, d)
            The inputs.

        Returns
        -------
        dict
            ``f`` (S, B); ``h`` (S, L+1, B, n) the residual stream h_ℓ; ``g``
            (S, L+1, B, n) the scaled gradients g_ℓ = (√n/α)∂f/∂h_ℓ of eq. 3 (with
            W̃ when decoupled); for post-activation networks ``u`` (S, L+1, B, n)
            the pre-activations u_0 = Ux/√d, u_ℓ = W_ℓ h_{ℓ−1}/√n (for
            ``block="post-nonlin-ms"`` ``u`` (S, L, B, n): u_ℓ = W_ℓ z_{ℓ−1}/√n,
            ℓ = 1..L); for two-layer blocks ``x`` (S, L, B, n) the internal
            representations x_ℓ (eq. 6).
        """
        fp = self.forward_pass(X)
        grads = self.backward_pass(fp, torch.zeros_like(fp.f))  # C ≥ 2: g_L = Σ_c v_c/√C
        out = {"f": fp.f, "h": fp.h.transpose(0, 1).clone(),
               "g": grads.g.transpose(0, 1).clone()}
        for name in ("u", "x"):
            if getattr(fp, name) is not None:
                out[name] = getattr(fp, name).transpose(0, 1).clone()
        return out

    @torch.no_grad()
    @serial()
    def gradients(self, X, y, loss: str | nfd.Loss | Callable = "mse") -> dict[str, torch.Tensor]:
        """∂ℒ̄/∂θ, ℒ̄ = (1/B) Σ_b ℒ(f(x_b), y_b), by the hand-written backward pass.

        For ``backward="coupled"`` this is the true gradient (appendix E, eq. 3,
        24); for ``"decoupled"`` it is the GIA gradient that the decoupled network
        follows. Seed axis first, same shapes as :meth:`parameters`.

        Parameters
        ----------
        X : array_like or Tensor, shape (B, d)
            The inputs.
        y : array_like or Tensor
            The targets: (B,) values, (B, C) values with C ≥ 2 outputs, or (B,)
            integer class labels for a loss with labels (``"cross_entropy"``).
        loss : str, nfd.Loss or callable
            ℒ, resolved by :func:`nfd.get_loss`.

        Returns
        -------
        dict of str to Tensor
            ∂ℒ̄/∂θ by parameter name (``"U"``, ``"v"``, ``"W"`` or ``"W1"``,
            ``"W2"``), new tensors. Nothing moves.
        """
        loss = nfd.get_loss(loss)
        fp = self.forward_pass(X)
        y = self._as_targets(y, fp.X.shape[0], loss)
        return self.backward_pass(fp, loss.grad(fp.f, _expand(y, fp.f, loss))).dense()

    @torch.no_grad()
    @serial()
    def sgd_step(self, X, y, loss: str | nfd.Loss | Callable = "mse",
                 eta_c: float | None = None) -> torch.Tensor:
        """One SGD step on the batch (X, y) (appendix E); returns f before the update.

        Every parameter moves by ``torch.optim.SGD``'s update (:meth:`apply_update`):
        −η ∂ℒ̄/∂θ for plain SGD (η₁ = η√L for W_{ℓ,1} when
        ``first_layer_lr="depth-aware"``), or by ``torch.optim.Adam`` / ``AdamW``'s
        with ``optimizer="adam"`` / ``"adamw"``, at this step's ``eta_c`` (default:
        the attribute).

        Parameters
        ----------
        X : array_like or Tensor, shape (B, d)
            The batch's inputs.
        y : array_like or Tensor
            Its targets, as in :meth:`gradients`.
        loss : str, nfd.Loss or callable
            ℒ, resolved by :func:`nfd.get_loss`.
        eta_c : float, optional
            η_c of this step (≥ 0); default the attribute ``eta_c``.

        Returns
        -------
        Tensor, shape (S, B), or (S, B, C) with C ≥ 2 outputs
            The outputs f before the update.
        """
        loss = nfd.get_loss(loss)
        fp = self.forward_pass(X)
        y = self._as_targets(y, fp.X.shape[0], loss)
        self.apply_update(self.backward_pass(fp, loss.grad(fp.f, _expand(y, fp.f, loss))),
                          eta_c)
        return fp.f

    def collapse_observables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Collapse observables of the last stored forward pass (two-layer blocks).

        Returns
        -------
        internal, residual : Tensor (S, L)
            Batch means of ‖x_ℓ⁽ᵏ⁾ − x̃_ℓ⁽ᵏ⁾‖/√n with x̃ = W_{ℓ,1}⁽⁰⁾h_{ℓ−1}⁽ᵏ⁾/√n
            (eq. 27) and ‖∂h − ∂h̃‖/√n with ∂h = (h_ℓ − h_{ℓ−1})/τ =
            (1/√(τn)) W_{ℓ,2}⁽ᵏ⁾φ(x_ℓ⁽ᵏ⁾) and ∂h̃ the same with W_{ℓ,2}⁽⁰⁾
            (eq. 33–34; √(L/n) at T = 1).
        """
        if not self.record_collapse:
            raise RuntimeError("collapse observables need block='two-layer' and record_collapse=True")
        if self._last is None:
            raise RuntimeError("no forward pass has been stored yet")
        return self._last.internal.T.clone(), self._last.residual.T.clone()

    # ------------------------------------------------- architecture hooks
    @abstractmethod
    def _embed(self, X: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        """h_0 from X (B, d); stored into ``fp.h[0]`` when ``fp`` is given."""

    @abstractmethod
    def _block(self, l: int, h: torch.Tensor, fp: ForwardPass | None) -> torch.Tensor:
        """h_{ℓ+1} from h_ℓ (block ℓ+1 of eq. 1 / 6 / 9)."""

    @abstractmethod
    def _block_backward(self, l: int, fp: ForwardPass, G: torch.Tensor,
                        w: torch.Tensor) -> dict[str, RankUpdate]:
        """Write g_ℓ into ``G[l]`` from ``G[l+1]``; return block ℓ+1's gradients."""

    @abstractmethod
    def _input_gradient(self, fp: ForwardPass, g0: torch.Tensor) -> torch.Tensor:
        """(√n/α) ∂f/∂(Ux/√d) from g_0."""
