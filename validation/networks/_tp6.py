"""Tensor Programs VI's depthwise parametrization (α, γ) of its post-nonlinearity block
with Mean Subtraction (paper 001, §6.3, Def. 6.1–6.2; issue 53): the checks of the
block's options and the hidden layers' learning rate in nfd's units.

The block (paper 001 §6.3; §10.2 adds the block multiplier a)::

    x^l = x^{l−1} + a·L^{−α}·MS(φ(h^l)),   h^l = W^l x^{l−1},   MS(x) = x − ⟨x, 1⟩/n,

with W^l ~ N(0, 1/n) entrywise. nfd stores W ~ N(0, 1) and writes
h_ℓ = W_ℓ h_{ℓ−1}/√n, the same network, and L^{−α} as (T/L)^α = τ^α: T is paper
001's base depth (§10.2 "base depth 8": replace L by L/8, i.e. T = 8; T = 1 is
paper 001's formula itself). The readout is μP's f = Vᵀx^L with V ~ N(0, 1/n²),
nfd's feature regime f = vᵀh_L/n.

Hidden rates. Def. 6.2 (eq. 4) trains W^l by W ← W − η n^{−1} L^{−γ} Q_t(n L^δ g),
with δ = α the exponent that makes n L^δ g = Θ(1) (faithfulness, Def. 6.1's
footnote 14). On nfd's N(0, 1) weights (W = √n W_paper, ∂/∂W = ∂/∂W_paper/√n) and
with L → L/T this is exactly

* SGD (Q = the gradient): torch lr η_c·n·τ^{γ−α} on W (U and v at η_c·n: μP);
* Adam / AdamW (Q = Adam's normalized step, Def. 6.1): torch lr η_c·τ^γ/√n on W,
  eps ε·τ^α/n^{3/2} (ε added to n^{3/2}τ^{−α}·g, Θ(1)), AdamW weight_decay
  λ/(τ^γ/√n); U and V at lr η_c with eps ε/n (:class:`nfd.schema.AdamRun`),

with η_c = paper 001's η (the same number). ``lr_exponent=γ`` sets γ; without it
the rate is nfd's rule at the branch exponent α (``hidden_lr``, the table of
:class:`nfd.schema.AdamRun`, :meth:`nfd.Parametrization.sgd_hidden_mult`):
γ = 1 − α for ``"depth-mup"``, and γ = 0 times T^{1−α} for Adam's ``"block-only"``.
The table between the two conventions is the guide's page on this block
(docs/guide/tp6_block.md).

The block multiplier a scales the branch only: paper 001 keeps the rate and δ when
it sweeps a (§10.2, Fig. 13), so ε's scaling holds no a.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import numpy as np

from nfd.schema import (MS_BLOCK, Parametrization, check_parametrization, check_positive_float,
                        power)

__all__ = ["MSOptions", "check_ms_options", "check_ms_parametrization", "sgd_hidden_mult",
           "adam_hidden_rate", "rate_words", "ms_attrs"]


class MSOptions(NamedTuple):
    """The options of the block of paper 001 §6.3 (module docstring).

    Attributes
    ----------
    block_multiplier : float
        a > 0 (§10.2, Fig. 13); 1 for every other block.
    layernorm : bool
        LayerNorm without affine on x^{l−1} before W^l (Fig. 12's "preLN").
    lr_exponent : float or None
        Paper 001's γ (Def. 6.2), or ``None``: nfd's rule of ``hidden_lr``.
    """

    block_multiplier: float = 1.0
    layernorm: bool = False
    lr_exponent: float | None = None


def check_ms_options(block: str, *, block_multiplier=1.0, layernorm=False,
                     lr_exponent=None, hidden_lr: str = "depth-mup",
                     regime: str = "feature", gamma0: float = 1.0) -> MSOptions:
    """The options of :data:`MS_BLOCK`, validated; other blocks must leave them at
    their defaults.

    Parameters
    ----------
    block : str
        The network's block.
    block_multiplier : float
        a > 0, finite.
    layernorm : bool
        Pre-LayerNorm (a bool).
    lr_exponent : float, optional
        γ, a finite real number.
    hidden_lr : str
        nfd's hidden-rate rule; must be ``"depth-mup"`` when γ is given.
    regime : str
        Must be ``"feature"`` (μP, paper 001 Table 2) for :data:`MS_BLOCK`.
    gamma0 : float
        Must be 1 for :data:`MS_BLOCK`: paper 001's readout has no γ₀.

    Returns
    -------
    MSOptions

    Raises
    ------
    TypeError, ValueError
        Naming the argument.
    """
    given = {"block_multiplier": block_multiplier != 1.0, "layernorm": layernorm is not False
             and not (isinstance(layernorm, np.bool_) and not layernorm),
             "lr_exponent": lr_exponent is not None}
    if block != MS_BLOCK:
        for name, set_ in given.items():
            if set_:
                raise ValueError(f"{name} is an option of block={MS_BLOCK!r} (Tensor Programs "
                                 f"VI, paper 001 §6.3), not of block={block!r}; use "
                                 f"block={MS_BLOCK!r} or leave {name} at its default")
        return MSOptions()
    if regime != "feature":
        raise ValueError(f"block={MS_BLOCK!r} with regime={regime!r}: paper 001's block "
                         "is muP (f = V^T x^L, V ~ N(0, 1/n^2)); use regime='feature'")
    if gamma0 != 1.0:
        raise ValueError(f"block={MS_BLOCK!r} with gamma0={gamma0!r}: paper 001's block "
                         "reads out f = V^T x^L with no gamma0 (it would divide f by "
                         "gamma0 and multiply the SGD rates by gamma0^2); use gamma0=1")
    if not isinstance(layernorm, (bool, np.bool_)):
        raise TypeError(f"layernorm must be True or False, got {layernorm!r}")
    a = check_positive_float("block_multiplier", block_multiplier)
    if lr_exponent is None:
        return MSOptions(a, bool(layernorm), None)
    if isinstance(lr_exponent, bool) or not isinstance(lr_exponent, numbers.Real) \
            or not math.isfinite(lr_exponent):
        raise TypeError(f"lr_exponent must be a finite real number (paper 001's gamma, "
                        f"e.g. 0.5 for Depth-muP), got {lr_exponent!r}")
    if hidden_lr != "depth-mup":
        raise ValueError(f"lr_exponent={lr_exponent!r} with hidden_lr={hidden_lr!r}: both "
                         "set the hidden rate; pass one (lr_exponent=0 is 'block-only' "
                         "at T = 1)")
    return MSOptions(a, bool(layernorm), float(lr_exponent))


def check_ms_parametrization(branch_exponent=0.5, trainable=("U", "W", "V")) -> Parametrization:
    """α ≥ 0 (paper 001's whole range: α = 0 is the standard parametrization, α > 1
    makes the branch vanish) and the trained families of :data:`MS_BLOCK`.

    Parameters
    ----------
    branch_exponent : float
        α, finite and ≥ 0.
    trainable : sequence of str
        As for :func:`nfd.schema.check_parametrization`.

    Returns
    -------
    Parametrization

    Raises
    ------
    TypeError, ValueError
        Naming ``branch_exponent`` or ``trainable``.
    """
    if isinstance(branch_exponent, bool) or not isinstance(branch_exponent, numbers.Real):
        raise TypeError(f"branch_exponent must be a real number >= 0 (paper 001's alpha), "
                        f"got {branch_exponent!r}")
    alpha = check_positive_float("branch_exponent", branch_exponent, allow_zero=True)
    return Parametrization(alpha, check_parametrization(0.5, trainable).trainable)


def sgd_hidden_mult(param: Parametrization, tau: float, lr_exponent: float | None) -> float:
    """SGD's lr of W over that of U and v: τ^{γ−α}, or nfd's τ^{1−2α} without γ.

    Parameters
    ----------
    param : Parametrization
        α.
    tau : float
        τ = T/L.
    lr_exponent : float or None
        γ.

    Returns
    -------
    float
    """
    if lr_exponent is None:
        return param.sgd_hidden_mult(tau)
    return power(tau, lr_exponent - param.branch_exponent)


def adam_hidden_rate(tau: float, width: int, lr_exponent: float) -> float:
    """Adam's lr of W over η_c at γ: τ^γ/√n (paper 001 eq. 4 in nfd's units).

    Parameters
    ----------
    tau : float
        τ = T/L.
    width : int
        n.
    lr_exponent : float
        γ.

    Returns
    -------
    float
    """
    return power(tau, lr_exponent) / math.sqrt(width)


def rate_words(param: Parametrization, optimizer: str, base: str, hidden_lr: str,
               lr_exponent: float | None) -> str:
    """torch's lr of every trained family in words: :meth:`Parametrization.rate_words
    <nfd.Parametrization.rate_words>`, with W's rate at γ when given
    (``base``·(T/L)^{γ−α} for SGD, η_c·(T/L)^γ/√n for Adam).

    Parameters
    ----------
    param : Parametrization
        α and the trained families.
    optimizer : {"sgd", "adam", "adamw"}
        The optimizer.
    base : str
        SGD's lr of U and v in words.
    hidden_lr : str
        nfd's hidden-rate rule.
    lr_exponent : float or None
        γ.

    Returns
    -------
    str
        E.g. ``"U, V: eta_c*n; W: eta_c*n*(T/L)^0.5"``.
    """
    words = param.rate_words(optimizer, base, hidden_lr)
    if lr_exponent is None:
        return words
    hidden = (f"{base}*(T/L)^{lr_exponent - param.branch_exponent:g}" if optimizer == "sgd"
              else f"eta_c*(T/L)^{lr_exponent:g}/sqrt(n)")
    io = words.rpartition("W: ")[0] if "W: " in words else f"U, V: {base}; "
    return f"{io}W: {hidden}"


def ms_attrs(options: MSOptions) -> dict:
    """netCDF-safe attrs of the block's options: ``block_multiplier``, ``layernorm``
    (0 or 1) and, when given, ``lr_exponent``.

    Parameters
    ----------
    options : MSOptions
        The block's options.

    Returns
    -------
    dict
    """
    out = {"block_multiplier": float(options.block_multiplier),
           "layernorm": int(options.layernorm)}
    if options.lr_exponent is not None:
        out["lr_exponent"] = float(options.lr_exponent)
    return out
