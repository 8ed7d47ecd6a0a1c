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
from dataclasses import dataclass

__all__ = ["PARAMETERS", "Parametrization", "check_parametrization", "power"]

#: The parameter families of the one-layer network: input weights U, hidden weights
#: W (every W_ℓ) and readout V (v for a scalar output).
PARAMETERS = ("U", "W", "V")


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
    """A validated depth parametrization (module docstring).

    Attributes
    ----------
    branch_exponent : float
        α ∈ [½, 1]: the branch multiplier (T/L)^α.
    trainable : tuple of str
        The trained families among :data:`PARAMETERS`, in that order; always has "W".
    """

    branch_exponent: float = 0.5
    trainable: tuple[str, ...] = PARAMETERS

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
            Adam's hidden-rate rule (:class:`nfd.schema.Adam`); any value other
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


def check_parametrization(branch_exponent=0.5, trainable=PARAMETERS,
                          block: str = "one-layer") -> Parametrization:
    """``branch_exponent`` and ``trainable`` of :func:`nfd.simulate`,
    :func:`nfd.linear_limit` and the finite networks, validated.

    Parameters
    ----------
    branch_exponent : float
        α ∈ [½, 1] of the branch multiplier (T/L)^α (½: depth-μP, 1: CompleteP).
    trainable : sequence of str
        The trained families among "U", "W", "V" (:data:`PARAMETERS`); must
        contain "W".
    block : str
        The residual block (``"one-layer"`` or ``"two-layer"``); only checked
        against α, which must be ½ unless it is ``"one-layer"``.

    Returns
    -------
    Parametrization
        With ``trainable`` in the order of :data:`PARAMETERS`.

    Raises
    ------
    TypeError
        ``branch_exponent`` not a real number; ``trainable`` a single string or not
        iterable.
    ValueError
        α outside [½, 1]; α ≠ ½ with two-layer blocks (derived for one-layer blocks
        only); a name in ``trainable`` other than "U", "W", "V" (the readout is "V",
        also for a scalar output), a repeated one, or no "W".
    """
    if isinstance(branch_exponent, bool) or not isinstance(branch_exponent, numbers.Real):
        raise TypeError(f"branch_exponent must be a number in [0.5, 1], got "
                        f"{branch_exponent!r}")
    alpha = float(branch_exponent)
    if not 0.5 <= alpha <= 1.0:
        raise ValueError(f"branch_exponent must lie in [0.5, 1] (0.5: depth-muP, 1: "
                         f"CompleteP), got {branch_exponent!r}")
    if alpha != 0.5 and block != "one-layer":
        raise ValueError(f"branch_exponent={branch_exponent!r} with block={block!r}: the "
                         "branch exponent is derived for one-layer blocks only; use "
                         "block='one-layer' or branch_exponent=0.5")
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
    return Parametrization(alpha, tuple(p for p in PARAMETERS if p in names))
