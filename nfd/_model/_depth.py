"""Depth parametrizations of the residual network and its limits: the branch exponent
α and the trained parameters (issue 35).

The one-layer block of paper 002 eq. 1 with branch multiplier (T/L)^α,

    h_ℓ = h_{ℓ−1} + τ^α W_ℓ φ(h_{ℓ−1})/√n,   τ = T/L,   α ∈ [½, 1],

is depth-μP at α = ½ (paper 002; Tensor Programs VI, paper 001, §4) and the "ODE"
or CompleteP parametrization at α = 1 (paper 001 §5, Fig. 11; paper 000 App. M, the
α ≥ ½ family). The hidden weights learn at the rate that keeps each layer's feature
update Θ(τ):

    SGD:   lr(W_ℓ) = η_c·n·τ^{1−2α}      (U, v at η_c·n, as at α = ½)
    Adam:  lr(W_ℓ) = η_c·τ^{1−α}/√n,  eps ε·τ^α/n^{3/2}  (paper 001 Def. 6.1)

and torch's ``weight_decay`` of W_ℓ is divided by the same rate factor, so that
lr·weight_decay = η_c·λ in every group (the initial weights of U, W and v decay by
the same a_k). The limit then keeps every drift of the α = ½ system: the learned
part of a layer moves the features by τ^α·(lr factor)·τ^α = τ times the same fields.
The initial weights enter through the drivers τ^α z (paper 002 Definition 1 has
√τ z) and, coupled, through the response terms of paper 000 eq. 38, which carry the
same factor: the forward field τ^α W₀φ/√n responds to the backward source
z̃ = W₀ᵀg/√n, which itself enters the dynamics as τ^α z̃, and Stein's lemma is taken
with respect to z̃. So the coefficient of both becomes τ^α, τ^{α−½} times depth-μP's
(:meth:`Parametrization.branch`); the response itself, E[∂φ/∂z̃], picks up a further
τ^{α−½} through the dynamics, so a response term is τ^{2α−1} times its α = ½ size.
For α > ½ both vanish as L → ∞ and the limit becomes an ODE in depth time, whose only
randomness is that of u and v (paper 001 §5, the ODE parametrization; paper 000
App. M proposes the rate η ∝ L^{2α−1} and leaves this limit open; paper 001 Claim
7.4: the trained features then lose their diversity).

``trainable`` names the parameters that learn; a frozen U or v keeps its initial
value (no update, no weight decay), and its drivers are unchanged. Paper 001 §3–4
and paper 000's main text train W alone.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields

import numpy as np

__all__ = ["PARAMETERS", "MS_BLOCK", "Parametrization", "block_style", "check_parametrization",
           "power"]

#: The parameter families of the one-layer network: input weights U, hidden weights
#: W (every W_ℓ) and readout V (v for a scalar output).
PARAMETERS = ("U", "W", "V")
#: Tensor Programs VI's post-nonlinearity block with Mean Subtraction (paper 001 §6.3):
#: the networks' ``block`` of :class:`Parametrization` whose options are
#: ``block_multiplier``, ``layernorm`` and ``lr_exponent``.
MS_BLOCK = "post-nonlin-ms"


def block_style(block: str | None) -> str:
    """The style a block implies when none is given, as networks and limits record it:
    ``"post"`` for Tensor Programs VI's post-nonlinearity block (:data:`MS_BLOCK`),
    ``"pre"`` (paper 002's eq. 1 and 6) otherwise.

    Parameters
    ----------
    block : str or None
        The residual block.

    Returns
    -------
    str
        ``"post"`` or ``"pre"``.
    """
    return "post" if block == MS_BLOCK else "pre"


def power(x: float, p: float) -> float:
    """x^p, with √x at p = ½ and 1 at p = 0 exactly (the numbers of α = ½ runs).

    Parameters
    ----------
    x : float
        The base, > 0 (a depth step τ or a depth L).
    p : float
        The exponent.

    Returns
    -------
    float
        x^p.
    """
    if p == 0.5:
        return math.sqrt(x)
    if p == 0:
        return 1.0
    return x ** p


@dataclass(frozen=True)
class Parametrization:
    """How a residual network scales with width and depth: one object for the block,
    the branch exponent α, the hidden-rate rule γ, the first layer's rate, the trained
    parameters, γ₀ and T (issue 51), taken by :func:`nfd.simulate`,
    :func:`nfd.linear_limit` and ``validation.train_resnet``.

    Each field is checked here for what no consumer accepts (types, ranges, options
    of another block); a consumer refuses what only it cannot do (the limits
    integrate one-layer and two-layer depth-μP blocks with α ∈ [½, 1], the networks
    also the μP, MLP, standard and Tensor Programs VI parametrizations). The presets
    (:meth:`depth_mup`, :meth:`complete_p`, :meth:`block_only`, :meth:`mup`,
    :meth:`standard`, :meth:`tp6`) name the parametrizations the report compares.

    Parameters
    ----------
    branch_exponent : float
        α ≥ 0: the branch multiplier (T/L)^α (½: depth-μP, 1: CompleteP; the limits
        take α ∈ [½, 1], Tensor Programs VI's block any α ≥ 0).
    trainable : sequence of {"U", "W", "V"}
        The trained families among :data:`nfd.schema.PARAMETERS`, stored in that order; must
        contain "W". A frozen U or readout V keeps its initial value.
    block : {"one-layer", "two-layer", "post-nonlin-ms"}
        The residual block: eq. 1 of paper 002, its eq. 6, or Tensor Programs VI's
        post-nonlinearity block with mean subtraction (paper 001 §6.3; networks).
    hidden_lr : {"depth-mup", "block-only"}
        The hidden rate's depth rule under Adam: depth-μP's (the default), or
        Tensor Programs VI's block-multiplier-only baseline ((α, γ) = (½, 0), its
        Fig. 10: √L times depth-μP's rate; :class:`nfd.schema.AdamRun`).
    first_layer_lr : {"depth-mup", "depth-aware"}
        Two-layer blocks: W_{ℓ,1} learns at m·η_c·γ₀²·n with m = 1 or √L (eq. 8).
    gamma0 : float
        γ₀ > 0, the feature-learning strength of paper 000 (f = vᵀh_L/(γ₀n); γ₀ → 0
        is the lazy limit).
    T : float
        The time horizon: the branch multiplier is (T/L)^α.
    scaling : {"depth-mup", "mup", "mlp", "standard"}
        The networks' residual stream: depth-μP, μP without the depth scaling of
        the branch (Figure 4b of paper 002), the μP MLP (Figure 4a), or the standard
        parametrization (with ``regime="kernel"``). The limits integrate depth-μP.
    regime : {"feature", "kernel"}
        The networks' output scale α = 1/√n (feature learning, Theorem 1) or 1.
    style : {"pre", "post"}, optional
        Pre-activation (eq. 1) or post-activation (eq. 9) networks; ``None`` (the
        default) is stored as the block's: ``"post"`` for ``block="post-nonlin-ms"``,
        else ``"pre"``.
    block_multiplier, layernorm, lr_exponent
        ``block="post-nonlin-ms"`` only (paper 001 §6.3, §10.2): the block
        multiplier a > 0, pre-LayerNorm, and Tensor Programs VI's γ (Def. 6.2;
        ``None``: nfd's rule of ``hidden_lr``).

    Raises
    ------
    TypeError, ValueError
        Naming the field, with the messages of the keywords these fields replace.
    """

    branch_exponent: float = 0.5
    trainable: tuple[str, ...] = PARAMETERS
    block: str = "one-layer"
    hidden_lr: str = "depth-mup"
    first_layer_lr: str = "depth-mup"
    gamma0: float = 1.0
    T: float = 1.0
    scaling: str = "depth-mup"
    regime: str = "feature"
    style: str | None = None
    block_multiplier: float = 1.0
    layernorm: bool = False
    lr_exponent: float | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "branch_exponent", _check_alpha(self.branch_exponent))
        set_(self, "trainable", _check_trainable(self.trainable))
        for name in ("block", "hidden_lr", "first_layer_lr", "scaling", "regime"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a string, got {getattr(self, name)!r}")
        if self.style is None:  # the block's own: paper 001's block is post-nonlinearity
            set_(self, "style", block_style(self.block))
        elif not isinstance(self.style, str):
            raise TypeError(f"style must be a string or None, got {self.style!r}")
        set_(self, "gamma0", _check_gamma0(self.gamma0))
        set_(self, "T", _positive("T", self.T))
        set_(self, "block_multiplier", _positive("block_multiplier", self.block_multiplier))
        if not isinstance(self.layernorm, (bool, np.bool_)):
            raise TypeError(f"layernorm must be True or False, got {self.layernorm!r}")
        set_(self, "layernorm", bool(self.layernorm))
        if self.lr_exponent is not None:
            if isinstance(self.lr_exponent, bool) or not isinstance(
                    self.lr_exponent, numbers.Real) or not math.isfinite(self.lr_exponent):
                raise TypeError(f"lr_exponent must be a finite real number (paper 001's "
                                f"gamma, e.g. 0.5 for Depth-muP), got {self.lr_exponent!r}")
            set_(self, "lr_exponent", float(self.lr_exponent))
        if self.block != "two-layer" and self.first_layer_lr != "depth-mup":
            raise ValueError(f"first_layer_lr={self.first_layer_lr!r} is for "
                             "block='two-layer' (one-layer blocks have no first internal "
                             "layer); leave it 'depth-mup'")
        _check_ms_fields(self)

    @classmethod
    def depth_mup(cls, **fields) -> "Parametrization":
        """Depth-μP (paper 002; Tensor Programs VI §4; the default): branch √(T/L),
        every layer's feature update Θ(T/L). ``fields`` override the preset's.

        Parameters
        ----------
        **fields
            Fields that override the preset's (e.g. ``trainable=("W",)``).

        Returns
        -------
        Parametrization
        """
        return cls(**fields)

    @classmethod
    def complete_p(cls, **fields) -> "Parametrization":
        """CompleteP, the ODE parametrization (α = 1; paper 001 §5, paper 000 App. M):
        branch T/L, W's rate rescaled to keep each layer's update Θ(T/L).

        Parameters
        ----------
        **fields
            Fields that override the preset's (e.g. ``trainable=("W",)``).

        Returns
        -------
        Parametrization
        """
        return cls(**{"branch_exponent": 1.0, **fields})

    @classmethod
    def block_only(cls, **fields) -> "Parametrization":
        """Tensor Programs VI's block-multiplier-only baseline ((α, γ) = (½, 0), its
        Fig. 10): the branch is scaled, Adam's hidden rate is not (``hidden_lr``).

        Parameters
        ----------
        **fields
            Fields that override the preset's (e.g. ``trainable=("W",)``).

        Returns
        -------
        Parametrization
        """
        return cls(**{"hidden_lr": "block-only", **fields})

    @classmethod
    def mup(cls, **fields) -> "Parametrization":
        """μP without depth scaling: the μP ResNet of paper 002's Figure 4b, branch
        √(T/n) at every depth (networks only).

        Parameters
        ----------
        **fields
            Fields that override the preset's (e.g. ``trainable=("W",)``).

        Returns
        -------
        Parametrization
        """
        return cls(**{"scaling": "mup", **fields})

    @classmethod
    def standard(cls, **fields) -> "Parametrization":
        """The standard parametrization: one torch lr η_c for weights N(0, 1/fan-in),
        f = vᵀh_L/√n (``scaling="standard"``, ``regime="kernel"``; networks only).

        Parameters
        ----------
        **fields
            Fields that override the preset's (e.g. ``trainable=("W",)``).

        Returns
        -------
        Parametrization
        """
        return cls(**{"scaling": "standard", "regime": "kernel", **fields})

    @classmethod
    def tp6(cls, alpha: float, gamma: float, **fields) -> "Parametrization":
        """Tensor Programs VI's (α, γ) map on its block (paper 001 §6.3, Def. 6.2):
        ``block="post-nonlin-ms"`` with branch L^{−α} (``branch_exponent``) and
        hidden rate exponent γ (``lr_exponent``).

        Parameters
        ----------
        alpha : float
            α ≥ 0, the branch exponent (``branch_exponent``).
        gamma : float
            γ, paper 001's hidden-rate exponent (``lr_exponent``).
        **fields
            Further fields (``layernorm``, ``block_multiplier``, ``T``, …).

        Returns
        -------
        Parametrization
        """
        return cls(**{"block": "post-nonlin-ms", "branch_exponent": alpha,
                      "lr_exponent": gamma, **fields})

    def to_dict(self) -> dict:
        """The fields as a TOML table (``[parametrization]``): every field, lists for
        ``trainable``, ``None`` fields left out.

        Returns
        -------
        dict
        """
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["trainable"] = list(self.trainable)
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, table: dict) -> "Parametrization":
        """The inverse of :meth:`to_dict` (a ``[parametrization]`` table).

        Parameters
        ----------
        table : dict
            Field names to values; unknown keys are refused.

        Returns
        -------
        Parametrization
        """
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - names)
        if unknown:
            raise ValueError(f"unknown parametrization field(s) {unknown}; the fields are "
                             f"{sorted(names)}")
        return cls(**table)

    @classmethod
    def from_attrs(cls, attrs: dict) -> "Parametrization":
        """The parametrization of a result Dataset's ``attrs`` (:func:`nfd.simulate`,
        :func:`nfd.linear_limit`, ``validation.train_resnet``), also after a netCDF
        round trip; absent keys take their defaults.

        Parameters
        ----------
        attrs : dict
            ``ds.attrs``.

        Returns
        -------
        Parametrization
        """
        out = {}
        for f in fields(cls):
            if f.name not in attrs or _is_none(attrs[f.name]):
                continue
            value = attrs[f.name]
            if f.name == "trainable":
                value = tuple(str(value).split(",")) if str(value) else ()
            elif f.name == "layernorm":
                value = bool(int(value))
            elif hasattr(value, "item"):
                value = value.item()
            out[f.name] = value
        return cls(**out)

    @property
    def default(self) -> bool:
        """Whether this is depth-μP with every parameter trained.

        Returns
        -------
        bool
            ``True`` for α = ½ with U, W and V trained: the runs before these
            options.
        """
        return self.branch_exponent == 0.5 and self.trainable == PARAMETERS

    def trains(self, name: str) -> bool:
        """Whether family ``name`` ("U", "W" or "V") learns.

        Parameters
        ----------
        name : str
            The family: ``"U"``, ``"W"`` or ``"V"`` (any other name is not trained).

        Returns
        -------
        bool
        """
        return name in self.trainable

    def branch(self, tau: float) -> float:
        """τ^α, the branch multiplier (√τ at α = ½); in the limit the factor of the
        initial weights' drivers and, coupled, of the response terms (module
        docstring; √τ in paper 002's Definition 1).

        Parameters
        ----------
        tau : float
            τ = T/L.

        Returns
        -------
        float
            τ^α.
        """
        return power(tau, self.branch_exponent)

    def sgd_hidden_mult(self, tau: float) -> float:
        """τ^{1−2α}: SGD's lr of W_ℓ over that of U and v (1 at α = ½).

        Parameters
        ----------
        tau : float
            τ = T/L.

        Returns
        -------
        float
            τ^{1−2α}.
        """
        return power(tau, 1.0 - 2.0 * self.branch_exponent)

    def adam_hidden_rate(self, tau: float) -> float:
        """τ^{1−α}: Adam's lr of W_ℓ is η_c times this over √n (√τ at α = ½).

        Parameters
        ----------
        tau : float
            τ = T/L.

        Returns
        -------
        float
            τ^{1−α}.
        """
        return power(tau, 1.0 - self.branch_exponent)

    def adam_hidden_words(self, hidden_lr: str = "depth-mup") -> str:
        """Adam's lr of W in words: η_c·(T/L)^{1−α}/√n, times L^{1−α} under
        ``hidden_lr="block-only"`` (at α = ½ the strings of before these options).

        Parameters
        ----------
        hidden_lr : {"depth-mup", "block-only"}
            Adam's hidden-rate rule (:class:`nfd.schema.AdamRun`); any value other
            than ``"block-only"`` reads as ``"depth-mup"``.

        Returns
        -------
        str
            E.g. ``"eta_c*sqrt(T/(L*n))"`` at α = ½, ``"eta_c/sqrt(n)"`` at α = 1 (for
            either rule: L^{1−α} = 1).
        """
        a = self.branch_exponent
        if a == 0.5:
            return "eta_c*sqrt(T/n)" if hidden_lr == "block-only" else "eta_c*sqrt(T/(L*n))"
        if a == 1:
            return "eta_c/sqrt(n)"
        scale = "T" if hidden_lr == "block-only" else "(T/L)"
        return f"eta_c*{scale}^{1 - a:g}/sqrt(n)"

    def rate_words(self, optimizer: str, base: str = "eta_c*n",
                   hidden_lr: str = "depth-mup") -> str:
        """torch's lr of every trained family in words (``base``: SGD's lr of U and v,
        e.g. "eta_c*gamma0^2*n"); plain depth-μP SGD with everything trained is
        ``base`` alone, as before these options.

        Parameters
        ----------
        optimizer : {"sgd", "adam", "adamw"}
            The optimizer; any value but ``"sgd"`` reads as Adam.
        base : str
            SGD's lr of U and v in words.
        hidden_lr : {"depth-mup", "block-only"}
            Adam's hidden-rate rule (:meth:`adam_hidden_words`); ignored for SGD.

        Returns
        -------
        str
            ``"U, V: <rate>; W: <rate>"`` over the trained families (U and V share
            a rate), e.g. ``"U, V: eta_c; W: eta_c*sqrt(T/(L*n))"``.
        """
        if optimizer == "sgd":
            if self.default:
                return base
            hidden = base if self.branch_exponent == 0.5 else \
                f"{base}*(T/L)^{1 - 2 * self.branch_exponent:g}"
            rates = {"U": base, "W": hidden, "V": base}
        else:
            rates = {"U": "eta_c", "W": self.adam_hidden_words(hidden_lr), "V": "eta_c"}
        io = [name for name in ("U", "V") if self.trains(name)]
        return "; ".join(([f"{', '.join(io)}: {rates[io[0]]}"] if io else [])
                         + [f"W: {rates['W']}"])

    def attrs(self) -> dict:
        """netCDF-safe attrs: ``branch_exponent`` and ``trainable`` ("U,W,V")."""
        return {"branch_exponent": float(self.branch_exponent),
                "trainable": ",".join(self.trainable)}


def _is_none(value) -> bool:
    """Whether an attrs value stands for ``None`` (``base_attrs`` writes "none")."""
    return isinstance(value, str) and value == "none"


def _positive(name: str, value) -> float:
    """A finite real number > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    out = float(value)
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def _check_alpha(branch_exponent) -> float:
    """α, a finite real number ≥ 0 (every consumer's range contains only such α)."""
    if isinstance(branch_exponent, bool) or not isinstance(branch_exponent, numbers.Real):
        raise TypeError(f"branch_exponent must be a number >= 0 (0.5: depth-muP, 1: "
                        f"CompleteP), got {branch_exponent!r}")
    alpha = float(branch_exponent)
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"branch_exponent must be a finite number >= 0 (0.5: depth-muP, 1: "
                         f"CompleteP), got {branch_exponent!r}")
    return alpha


def _check_gamma0(gamma0) -> float:
    """γ₀ > 0 with γ₀² a positive finite float (the learning rate holds γ₀²)."""
    g0 = _positive("gamma0", gamma0)
    if not 0 < g0 * g0 < float("inf"):
        raise ValueError(f"gamma0 must be between 1e-150 and 1e150 (the learning rate holds "
                         f"gamma0^2), got {gamma0!r}")
    return g0


def _check_trainable(trainable) -> tuple[str, ...]:
    """The trained families in the order of :data:`PARAMETERS`; must contain "W"."""
    if isinstance(trainable, str) or not hasattr(trainable, "__iter__"):
        raise TypeError(f"trainable must be a sequence of names from {PARAMETERS}, e.g. "
                        f"('W',), got {trainable!r}")
    names = list(trainable)
    for name in names:
        if name not in PARAMETERS:
            hint = (f" (write {name.upper()!r}: the readout is 'V' also for a scalar output)"
                    if isinstance(name, str) and name.upper() in PARAMETERS else "")
            raise ValueError(f"trainable holds {name!r}; the parameters are {PARAMETERS}{hint}")
    if len(set(names)) != len(names):
        raise ValueError(f"trainable names a parameter twice: {tuple(names)!r}")
    if "W" not in names:
        raise ValueError(f"trainable={tuple(names)!r} must contain 'W': the hidden weights "
                         "carry the feature learning the limit describes")
    return tuple(p for p in PARAMETERS if p in names)


def _check_ms_fields(param: Parametrization) -> None:
    """The options of Tensor Programs VI's block are refused on every other block, and
    checked against the block by the networks."""
    if param.block != MS_BLOCK:
        given = {"block_multiplier": param.block_multiplier != 1.0,
                 "layernorm": param.layernorm, "lr_exponent": param.lr_exponent is not None}
        for name, set_ in given.items():
            if set_:
                raise ValueError(f"{name} is an option of block={MS_BLOCK!r} (Tensor Programs "
                                 f"VI, paper 001 §6.3), not of block={param.block!r}; use "
                                 f"block={MS_BLOCK!r} or leave {name} at its default")


def check_parametrization(branch_exponent=0.5, trainable=PARAMETERS,
                          block: str = "one-layer") -> Parametrization:
    """``branch_exponent`` and ``trainable`` of the limits (:func:`nfd.simulate`,
    :func:`nfd.linear_limit`) and the depth-μP networks, validated.

    Parameters
    ----------
    branch_exponent : float
        α ∈ [½, 1] of the branch multiplier (T/L)^α (½: depth-μP, 1: CompleteP).
    trainable : sequence of str
        The trained families among "U", "W", "V" (:data:`PARAMETERS`); must
        contain "W".
    block : str
        The residual block (``"one-layer"``, ``"two-layer"`` or
        ``"post-nonlin-ms"``); only checked against α, which must be ½ for
        ``"two-layer"``.

    Returns
    -------
    Parametrization
        With ``trainable`` in the order of :data:`PARAMETERS` (the other fields at
        their defaults).

    Raises
    ------
    TypeError
        ``branch_exponent`` not a real number; ``trainable`` a single string or not
        iterable.
    ValueError
        α outside [½, 1]; α ≠ ½ with two-layer blocks (derived for one-layer blocks
        and Tensor Programs VI's only); a name in ``trainable`` other than "U", "W", "V" (the readout is "V",
        also for a scalar output), a repeated one, or no "W".
    """
    if isinstance(branch_exponent, bool) or not isinstance(branch_exponent, numbers.Real):
        raise TypeError(f"branch_exponent must be a number in [0.5, 1], got "
                        f"{branch_exponent!r}")
    alpha = float(branch_exponent)
    if not 0.5 <= alpha <= 1.0:
        raise ValueError(f"branch_exponent must lie in [0.5, 1] (0.5: depth-muP, 1: "
                         f"CompleteP), got {branch_exponent!r}")
    if alpha != 0.5 and block not in ("one-layer", MS_BLOCK):
        raise ValueError(f"branch_exponent={branch_exponent!r} with block={block!r}: the "
                         f"branch exponent is derived for one-layer blocks and {MS_BLOCK!r} "
                         "only; use one of them or branch_exponent=0.5")
    return Parametrization(alpha, _check_trainable(trainable))
