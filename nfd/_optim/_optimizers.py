"""The optimizer of both limits and of the finite networks: ``torch.optim.SGD``.

The finite network is eq. 1 of paper 002 with the output scale of paper 000,
f = vᵀh_L/(γ₀ n), and all its parameters θ (U, every W_ℓ, v) form one group of
``torch.optim.SGD(lr=η_c(k)·γ₀²·n, momentum=β, weight_decay=λ/(γ₀²n),
dampening=0, nesterov=False)``. Writing ∇̂_s = γ₀²n·∂ℒ̄_s/∂θ for the rescaled batch
gradient of step s, torch's update reads, with no n left in it,

    m_k = β m_{k−1} + ∇̂_k + λ θ_k        (m_{−1} = 0)
    θ_{k+1} = θ_k − η_c(k) m_k,

so θ_k is linear in θ_0 and the gradients (paper 000, App. K.5 for momentum and
App. L for weight decay, there in continuous time):

    θ_k = a_k θ_0 − Σ_{s<k} c_{k,s} ∇̂_s.

The scalars a_k, c_{k,s} follow from the same recurrence on coefficient vectors
(:meth:`SGDRun.coefficients`). Plain SGD at one learning rate (β = λ = 0) has a_k = 1,
c_{k,s} = η_c. In both limits the initial weights enter only through their
Gaussian drivers, which are therefore scaled by a_k, and each earlier trajectory's
gradient enters the drifts with weight γ₀·c_{k,s}·χ_i/B
(``nfd._simulation._simulate`` module docstring).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from .._schema import check_int, check_positive_float
from .._model import Parametrization, power

__all__ = ["OPTIMIZERS", "OPTIMIZER_TITLES", "HIDDEN_LRS", "SGDRun", "AdamRun", "check_sgd",
           "check_optimizer", "adam_step_", "scale_step", "warmup_cosine"]

#: The optimizers of both limits and of the finite networks: ``torch.optim.SGD``,
#: ``torch.optim.Adam`` and ``torch.optim.AdamW`` with the per-group scaling of
#: :class:`AdamRun` (issue 34's contract).
OPTIMIZERS = ("sgd", "adam", "adamw")
#: How messages and figures name them: torch's class names.
OPTIMIZER_TITLES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}
#: Adam's depth rules for the hidden rate (:class:`AdamRun`): depth-μP's η_c·√(T/(Ln)),
#: and the "block multiplier only" baseline η_c·√(T/n) of Tensor Programs VI, Fig. 10
#: ((α, γ) = (½, 0): the branch is scaled, the learning rate is not).
HIDDEN_LRS = ("depth-mup", "block-only")
#: torch's defaults, which ``betas=None`` and ``eps=None`` stand for.
DEFAULT_BETAS = (0.9, 0.999)
DEFAULT_EPS = 1e-8


def scale_step(a: float, p: float, eta_c: float, momentum: float,
               weight_decay: float) -> tuple[float, float]:
    """One SGD step of the θ_0 coefficients: a of the weights, p of the momentum
    buffer (module docstring: m_k = βm_{k−1} + ∇̂_k + λθ_k, θ_{k+1} = θ_k − η_c(k)m_k),
    starting from (1, 0).

    Parameters
    ----------
    a : float
        a_k, the θ_0 coefficient of the weights before the step.
    p : float
        p_{k−1}, the θ_0 coefficient of the momentum buffer before the step.
    eta_c : float
        η_c(k), the step's learning rate.
    momentum : float
        β.
    weight_decay : float
        λ.

    Returns
    -------
    tuple of float
        (a_{k+1}, p_k).
    """
    p = momentum * p + weight_decay * a
    return a - eta_c * p, p


@dataclass(frozen=True, eq=False)
class SGDRun:
    """The validated optimizer of a run of K SGD steps.

    Attributes
    ----------
    eta_c : numpy.ndarray, shape (K,)
        η_c(k), float64: step k uses ``lr = eta_c[k]·γ₀²·n`` in the network.
    momentum : float
        β in [0, 1) (``torch.optim.SGD``'s ``momentum``).
    weight_decay : float
        λ ≥ 0; the network's ``weight_decay`` is λ/(γ₀²n), so a step without
        momentum multiplies the weights by 1 − η_c(k)·λ.
    gamma0 : float
        γ₀ > 0, the feature-learning strength: f = vᵀh_L/(γ₀n). γ₀ → 0 is the lazy
        (kernel) limit.
    """

    eta_c: np.ndarray
    momentum: float = 0.0
    weight_decay: float = 0.0
    gamma0: float = 1.0

    @property
    def constant(self) -> bool:
        """Whether every step has the same η_c."""
        return bool(np.all(self.eta_c == self.eta_c[0])) if self.eta_c.size else True

    @property
    def plain(self) -> bool:
        """Whether this is plain SGD at one learning rate with γ₀ = 1.

        Returns
        -------
        bool
            ``True`` for one η_c at every step, no momentum, no weight decay and
            γ₀ = 1: the runs of nfd before these options, kept bit for bit (no
            coefficient is recomputed).
        """
        return (self.constant and self.momentum == 0 and self.weight_decay == 0
                and self.gamma0 == 1)

    @property
    def peak(self) -> float:
        """max_k η_c(k) (0 for K = 0)."""
        return float(self.eta_c.max()) if self.eta_c.size else 0.0

    def coefficients(self) -> Iterator[tuple[float, np.ndarray]]:
        """(a_k, c_k) for k = 0..K: θ_k = a_k θ_0 − Σ_{s<k} c_k[s] ∇̂_s (module
        docstring), c_k of length k, float64 (a view valid until the next item)."""
        K, beta, lam = self.eta_c.size, self.momentum, self.weight_decay
        a, p = 1.0, 0.0  # θ_0 coefficient of θ and of the momentum buffer m
        c, q = np.zeros(K), np.zeros(K)  # gradient coefficients of −θ and of m
        for k in range(K + 1):
            yield a, c[:k]
            if k == K:
                return
            q *= beta
            q[k] += 1.0
            q[:k] -= lam * c[:k]
            c[:k + 1] += self.eta_c[k] * q[:k + 1]
            a, p = scale_step(a, p, self.eta_c[k], beta, lam)

    def weight_scales(self) -> np.ndarray:
        """a_k for k = 0..K, (K+1,): the factor of the initial weights after k steps
        (of the decoupled network's backward copy W̃ − W as well)."""
        return np.array([a for a, _ in self.coefficients()])

    def attrs(self) -> dict:
        """netCDF-safe attrs: ``eta_c`` (the constant, or the peak of a schedule),
        ``eta_c_schedule`` ("constant" or the K values), ``momentum``,
        ``weight_decay``, ``gamma0``."""
        return {"eta_c": float(self.eta_c[0]) if self.constant and self.eta_c.size
                else self.peak,
                "eta_c_schedule": "constant" if self.constant else self.eta_c.copy(),
                "momentum": self.momentum, "weight_decay": self.weight_decay,
                "gamma0": self.gamma0}


def _schedule(eta_c, K: int) -> np.ndarray:
    """η_c as K float64 values: a number, a sequence of K numbers or a callable
    k → number; every value finite and ≥ 0."""
    if hasattr(eta_c, "detach"):  # a torch tensor (no gradient is kept)
        eta_c = eta_c.detach().cpu().numpy()
    if getattr(eta_c, "ndim", None) == 0 and hasattr(eta_c, "item"):  # 0-d array
        eta_c = eta_c.item()
    if callable(eta_c):
        values = []
        for k in range(K):
            v = eta_c(k)
            if getattr(v, "ndim", None) == 0 and hasattr(v, "item"):  # numpy / torch 0-d
                v = v.item()
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"eta_c({k}) must return a real number, got "
                                f"{type(v).__name__}")
            values.append(float(v))
        out, what = np.asarray(values, dtype=np.float64), "eta_c(k)"
    elif isinstance(eta_c, numbers.Real) and not isinstance(eta_c, bool):
        return np.full(K, check_positive_float("eta_c", eta_c, allow_zero=True))
    elif isinstance(eta_c, (str, bytes)) or not hasattr(eta_c, "__len__"):
        raise TypeError("eta_c must be a real number, a sequence of one per SGD step or a "
                        f"callable k -> number, got {type(eta_c).__name__}")
    else:
        raw = np.asarray(eta_c)
        if raw.dtype.kind not in "iuf":
            raise TypeError(f"eta_c must hold real numbers (one learning rate per SGD step), "
                            f"got an array of dtype {raw.dtype}")
        out, what = raw.astype(np.float64), "eta_c"
        if out.shape != (K,):
            raise ValueError(f"eta_c must hold one learning rate per SGD step, {K} values "
                             f"for the run's {K} steps, got shape {out.shape}")
    bad = np.flatnonzero(~np.isfinite(out) | (out < 0))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"{what} must be finite and >= 0 at every step; step {k} has "
                         f"{out[k]!r}")
    return out


def check_sgd(eta_c: float | Sequence[float] | Callable[[int], float], K: int, *,
              momentum: float = 0.0, weight_decay: float = 0.0,
              gamma0: float = 1.0) -> SGDRun:
    """The optimizer of a run of K steps from the user's arguments (:class:`SGDRun`).

    Parameters
    ----------
    eta_c : float, sequence of float or callable
        η_c: a number for every step, a sequence of K numbers, or a callable
        k → number (a 0-d array or tensor counts as a number); every value finite
        and ≥ 0.
    K : int
        The number of SGD steps.
    momentum : float
        β in [0, 1).
    weight_decay : float
        λ ≥ 0, finite.
    gamma0 : float
        γ₀ > 0, finite, with γ₀² a positive finite float (the learning rate holds
        γ₀²).

    Returns
    -------
    SGDRun

    Raises
    ------
    TypeError, ValueError
        Naming the argument: a schedule of the wrong length, a negative, NaN or
        infinite learning rate, ``momentum`` outside [0, 1), a negative or infinite
        ``weight_decay``, ``gamma0`` ≤ 0 or infinite.
    """
    lr = _schedule(eta_c, K)
    beta = check_positive_float("momentum", momentum, allow_zero=True)
    if beta >= 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r} (torch.optim.SGD's "
                         "momentum: 0.9 is usual)")
    lam = check_positive_float("weight_decay", weight_decay, allow_zero=True)
    g0 = check_positive_float("gamma0", gamma0)
    if not 0 < g0 * g0 < float("inf"):
        raise ValueError(f"gamma0 must be between 1e-150 and 1e150 (the learning rate holds "
                         f"gamma0^2), got {gamma0!r}")
    return SGDRun(lr, beta, lam, g0)


@dataclass(frozen=True, eq=False)
class AdamRun:
    """The validated ``torch.optim.Adam`` / ``AdamW`` of a run of K steps, in the
    width- and depth-independent units of depth-μP (Tensor Programs VI, Def. 6.1
    "entrywise optimizers" and Table 1's depth-μP Adam row).

    The network of eq. 1 (paper 002), h₀ = Ux/√d, h_ℓ = h_{ℓ−1} + √(T/(Ln)) W_ℓ
    φ(h_{ℓ−1}), f = Vᵀh_L/n, is trained by exactly ``torch.optim.Adam`` (or
    ``AdamW``) with ``betas`` and these parameter groups (:meth:`groups`):

    =========  ======================  ===================  ======================
    group      lr                      eps                  AdamW weight_decay
    =========  ======================  ===================  ======================
    U          η_c(k)                  ε/n                  λ
    every W_ℓ  η_c(k)·√(T/(Ln))        ε·√(T/L)/n^{3/2}     λ/√(T/(Ln))
    V          η_c(k)                  ε/n                  λ
    =========  ======================  ===================  ======================

    Each group's Adam direction is then m̂/(√v̂ + ε) of its *rescaled* gradient
    (χ g_iφ_j for W_ℓ with g = n·∂f/∂h, χ g_{0,i}x_j/√d for U, χ h_i for V), with no
    n or L left in it, so ε is Θ(1) in the limit; the hidden rate is η_c times the
    block multiplier (μP in width, η/√L in depth); AdamW shrinks every parameter by
    1 − η_c(k)·λ per step; each step moves each layer's features by Θ(T/L).

    ``hidden_lr="block-only"`` is the baseline that keeps the branch multiplier but
    not the learning rate's depth scaling (Tensor Programs VI, Fig. 10 middle,
    (α, γ) = (½, 0)): every W_ℓ at lr η_c(k)·√(T/n), i.e. m = √L times the table's,
    with eps unchanged and weight_decay λ/(m·√(T/(Ln))), so that AdamW still shrinks
    every parameter by 1 − η_c(k)·λ. Each step then moves each layer's features by
    Θ(T/√L): at a fixed L its width limit exists (the table's with the learned
    block's drift times m), but it has no depth limit, and the optimal η_c should
    fall like L^{−1/2}.

    A branch exponent α ≠ ½ (``branch_exponent``, ``nfd._model._depth``; branch
    (T/L)^α W φ/√n) changes W's row only: lr η_c(k)·(T/L)^{1−α}/√n (times L^{1−α}
    under ``hidden_lr="block-only"``), eps ε·(T/L)^α/n^{3/2}, weight_decay λ over W's
    lr factor (:meth:`groups` with its ``param``); frozen families get no group.

    Attributes
    ----------
    eta_c : numpy.ndarray, shape (K,)
        η_c(k), float64.
    betas : (float, float)
        (β₁, β₂), each in [0, 1).
    eps : float
        ε ≥ 0 in the rescaled units above (torch's eps of each group is in the table).
    weight_decay : float
        λ ≥ 0, AdamW's decoupled decay (0 for ``"adam"``).
    decoupled_decay : bool
        ``True`` for ``torch.optim.AdamW``, ``False`` for ``torch.optim.Adam``.
    hidden_lr : {"depth-mup", "block-only"}
        The depth rule of the hidden rate (above).
    momentum, gamma0 : float
        SGD's options, fixed at 0 and 1 so that code reading them sees plain values.
    """

    eta_c: np.ndarray
    betas: tuple[float, float] = DEFAULT_BETAS
    eps: float = DEFAULT_EPS
    weight_decay: float = 0.0
    decoupled_decay: bool = False
    hidden_lr: str = "depth-mup"
    #: The SGD-only options, fixed, so that code reading them sees plain values.
    momentum: float = 0.0
    gamma0: float = 1.0

    @property
    def name(self) -> str:
        """``"adam"`` or ``"adamw"``."""
        return "adamw" if self.decoupled_decay else "adam"

    @property
    def constant(self) -> bool:
        """Whether every step has the same η_c."""
        return bool(np.all(self.eta_c == self.eta_c[0])) if self.eta_c.size else True

    @property
    def peak(self) -> float:
        """max_k η_c(k) (0 for K = 0)."""
        return float(self.eta_c.max()) if self.eta_c.size else 0.0

    def weight_scales(self) -> np.ndarray:
        """a_k = Π_{s<k} (1 − η_c(s)·λ) for k = 0..K, (K+1,): the factor of the initial
        weights after k steps (AdamW decays before it steps; 1 for Adam), and of
        the decoupled network's backward copy W̃ − W."""
        decay = 1.0 - self.eta_c * self.weight_decay
        return np.concatenate([[1.0], np.cumprod(decay)])

    def hidden_mult(self, depth: int, branch_exponent: float = 0.5) -> float:
        """m, the hidden rate's factor over the table's: 1 under depth-μP, L^{1−α}
        (√L at the branch exponent α = ½) for ``hidden_lr="block-only"``.

        Parameters
        ----------
        depth : int
            L.
        branch_exponent : float
            α ∈ [½, 1].

        Returns
        -------
        float
            m.
        """
        return power(depth, 1.0 - branch_exponent) if self.hidden_lr == "block-only" else 1.0

    def groups(self, width: int, depth: int, T: float,
               param: Parametrization = Parametrization()) -> dict[str, dict[str, float]]:
        """The table above for a network of width n and depth L: per group
        (``"U"``, ``"W"``, ``"V"``) the multiplier of η_c(k) in ``lr``, torch's
        ``eps`` and torch's ``weight_decay`` (``lr_mult``, ``eps``, ``weight_decay``);
        the hidden ``lr_mult`` is m·√(T/(Ln)) (:meth:`hidden_mult`). A branch
        exponent α (``param``, ``nfd._model._depth``): W at lr m·(T/L)^{1−α}/√n with eps
        ε·(T/L)^α/n^{3/2}; frozen families (``param.trainable``) get no group.

        Parameters
        ----------
        width : int
            n.
        depth : int
            L.
        T : float
            The time horizon.
        param : Parametrization
            The branch exponent α and the trained families (default depth-μP, all
            trained).

        Returns
        -------
        dict of str to dict of str to float
            Per trained family (``"U"``, ``"W"``, ``"V"``): ``lr_mult``, ``eps`` and
            ``weight_decay`` (λ over the hidden ``lr_mult`` for W, so that
            lr·weight_decay = η_c·λ; λ for U and V).
        """
        n = float(width)
        alpha = param.branch_exponent
        if alpha == 0.5:
            block = math.sqrt(T / (depth * n))  # √(T/(Ln)), the branch multiplier
            rate = block * self.hidden_mult(depth)
            eps = self.eps * math.sqrt(T / depth) / n**1.5
        else:
            rate = param.adam_hidden_rate(T / depth) / math.sqrt(n) * self.hidden_mult(depth, alpha)
            eps = self.eps * param.branch(T / depth) / n**1.5
        io = {"lr_mult": 1.0, "eps": self.eps / n, "weight_decay": self.weight_decay}
        hidden = {"lr_mult": rate, "eps": eps, "weight_decay": self.weight_decay / rate}
        out = {"U": dict(io), "W": hidden, "V": dict(io)}
        return {name: group for name, group in out.items() if param.trains(name)}

    def attrs(self) -> dict:
        """netCDF-safe attrs: ``optimizer``, ``eta_c`` (the constant, or the peak of a
        schedule), ``eta_c_schedule``, ``betas``, ``eps``, ``weight_decay``,
        ``momentum`` (0), ``gamma0`` (1) and ``hidden_lr``."""
        return {"optimizer": self.name,
                "eta_c": float(self.eta_c[0]) if self.constant and self.eta_c.size
                else self.peak,
                "eta_c_schedule": "constant" if self.constant else self.eta_c.copy(),
                "betas": np.asarray(self.betas, dtype=np.float64), "eps": self.eps,
                "weight_decay": self.weight_decay, "momentum": 0.0, "gamma0": 1.0,
                "hidden_lr": self.hidden_lr}


def adam_step_(acc: torch.Tensor, m: torch.Tensor, v: torch.Tensor, grad: torch.Tensor,
               k: int, opt: AdamRun, work: torch.Tensor | None = None) -> None:
    """Step k (0-based) of :class:`AdamRun` on one state, in place, as torch computes it
    (``torch.optim.Adam`` / ``AdamW``, single-tensor form)::

        m ← β₁ m + (1 − β₁) G,     v ← β₂ v + (1 − β₂) G²
        D = (m / (1 − β₁^{k+1})) / (√v / √(1 − β₂^{k+1}) + ε)
        A ← (1 − η_c(k) λ) A + η_c(k) D

    so that the parameter after k + 1 steps is a_{k+1} θ₀ − (its group's lr
    multiplier) · A (:meth:`AdamRun.weight_scales`). G is the rescaled gradient of the
    table in :class:`AdamRun` and A the accumulated, decayed displacement in units of
    η_c. m and v are updated as torch updates them (``lerp_``, ``addcmul_``); the
    direction is computed as (√(1−β₂ᵗ)/(1−β₁ᵗ))·m/(√v + ε√(1−β₂ᵗ)), the same number
    up to rounding with two passes fewer over the state (the limit's states are P×P).

    Parameters
    ----------
    acc : torch.Tensor
        A, updated in place.
    m, v : torch.Tensor
        Adam's first and second moment states, updated in place.
    grad : torch.Tensor
        G, the rescaled gradient of step k.
    k : int
        The step, 0-based.
    opt : AdamRun
        The optimizer: betas, ε, η_c(k) and, for AdamW, λ.
    work : torch.Tensor, optional
        A buffer of G's shape, which saves allocating √v at every call.
    """
    beta1, beta2 = opt.betas
    t = k + 1
    eta = float(opt.eta_c[k])
    root2 = math.sqrt(1.0 - beta2**t)
    m.lerp_(grad, 1.0 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    denom = torch.sqrt(v, out=work).add_(opt.eps * root2)
    if opt.decoupled_decay and opt.weight_decay:
        acc.mul_(1.0 - eta * opt.weight_decay)
    acc.addcdiv_(m, denom, value=eta * root2 / (1.0 - beta1**t))


def check_optimizer(optimizer: str, eta_c, K: int, *, momentum: float = 0.0,
                    weight_decay: float = 0.0, gamma0: float = 1.0, betas=None,
                    eps=None, hidden_lr: str = "depth-mup") -> SGDRun | AdamRun:
    """The optimizer of a run of K steps from the user's arguments: :class:`SGDRun`
    for ``optimizer="sgd"`` (:func:`check_sgd`), :class:`AdamRun` for ``"adam"`` and
    ``"adamw"``.

    Parameters
    ----------
    optimizer : {"sgd", "adam", "adamw"}
        ``torch.optim.SGD``, ``torch.optim.Adam`` or ``torch.optim.AdamW``.
    eta_c, K, momentum, weight_decay, gamma0
        As for :func:`check_sgd`; with Adam, ``momentum`` must be 0 and ``gamma0``
        1, and ``weight_decay`` (AdamW's λ) must be 0 for ``"adam"``.
    betas : (float, float), optional
        Adam's (β₁, β₂), each in [0, 1); None stands for torch's default
        (0.9, 0.999). SGD takes none.
    eps : float, optional
        Adam's ε ≥ 0 (:class:`AdamRun`); None stands for torch's default 1e-8. SGD
        takes none.
    hidden_lr : {"depth-mup", "block-only"}
        Adam's depth rule of the hidden rate (:data:`HIDDEN_LRS`); ``"depth-mup"``
        with SGD.

    Returns
    -------
    SGDRun or AdamRun

    Raises
    ------
    TypeError, ValueError
        Naming the argument: an unknown ``optimizer``; ``betas`` or ``eps`` with SGD;
        with Adam, ``momentum`` (Adam's first-moment decay is ``betas[0]``),
        ``gamma0`` ≠ 1, ``weight_decay`` with ``"adam"`` (use ``"adamw"``), betas
        outside [0, 1), ε < 0; ``hidden_lr`` not in :data:`HIDDEN_LRS`, or other than
        ``"depth-mup"`` with SGD; and everything :func:`check_sgd` refuses.
    """
    if not isinstance(optimizer, str) or optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    if not isinstance(hidden_lr, str) or hidden_lr not in HIDDEN_LRS:
        raise ValueError(f"hidden_lr must be one of {HIDDEN_LRS}, got {hidden_lr!r}")
    if optimizer == "sgd" and hidden_lr != "depth-mup":
        raise ValueError(f"hidden_lr={hidden_lr!r} is an Adam baseline (optimizer='adam' or "
                         "'adamw'); SGD's hidden rate is depth-muP's eta_c*n (leave "
                         "hidden_lr='depth-mup')")
    if optimizer == "sgd":
        for name, value in (("betas", betas), ("eps", eps)):
            if value is not None:
                raise ValueError(f"{name} is an argument of optimizer='adam' or 'adamw'; "
                                 "torch.optim.SGD has none (leave it None)")
        return check_sgd(eta_c, K, momentum=momentum, weight_decay=weight_decay,
                         gamma0=gamma0)
    base = check_sgd(eta_c, K, momentum=momentum, weight_decay=weight_decay, gamma0=gamma0)
    if base.momentum:
        raise ValueError(f"momentum is torch.optim.SGD's; with optimizer={optimizer!r} "
                         "the first-moment decay is betas[0] (leave momentum at 0)")
    if base.gamma0 != 1:
        raise ValueError(f"gamma0 must be 1 with optimizer={optimizer!r}: Adam's update "
                         "does not scale with the gradient, so gamma0 has no derived "
                         "meaning there (leave it at 1)")
    if base.weight_decay and optimizer == "adam":
        raise ValueError("weight_decay with optimizer='adam' is torch's L2 term added to "
                         "the gradient, which has no width-independent meaning here; use "
                         "optimizer='adamw' (decoupled decay: every step shrinks the "
                         "weights by 1 - eta_c*weight_decay)")
    return AdamRun(base.eta_c, _check_betas(betas), _check_eps(eps), base.weight_decay,
                optimizer == "adamw", hidden_lr)


def _check_betas(betas) -> tuple[float, float]:
    """(β₁, β₂) in [0, 1)² (default (0.9, 0.999))."""
    if betas is None:
        return DEFAULT_BETAS
    if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    out = []
    for i, b in enumerate(betas):
        if getattr(b, "ndim", None) == 0 and hasattr(b, "item"):  # numpy / torch 0-d
            b = b.item()
        if isinstance(b, bool) or not isinstance(b, numbers.Real):
            raise TypeError(f"betas[{i}] must be a real number, got {type(b).__name__}")
        if not 0.0 <= float(b) < 1.0:
            raise ValueError(f"betas[{i}] must be in [0, 1), got {b!r} (torch's default "
                             "betas are (0.9, 0.999))")
        out.append(float(b))
    return out[0], out[1]


def _check_eps(eps) -> float:
    """ε ≥ 0, finite (default 1e-8)."""
    if eps is None:
        return DEFAULT_EPS
    return check_positive_float("eps", eps, allow_zero=True)


def warmup_cosine(steps: int, *, peak: float = 1.0, warmup: int = 0,
                  final: float = 0.0) -> np.ndarray:
    """A linear warm-up followed by a cosine decay: η_c(k) for k = 0..steps−1.

    η_c(k) = peak·(k+1)/warmup for k < warmup, then
    final + (peak − final)·(1 + cos(π (k − warmup)/(steps − warmup)))/2, so that the
    first step after the warm-up runs at the peak and the decay reaches ``final``
    one step after the last. Pass the result as ``eta_c`` (paper 000 trains with
    such schedules, its Fig. 4).

    Parameters
    ----------
    steps : int
        K, the number of SGD steps.
    peak : float
        The largest learning rate (≥ 0).
    warmup : int
        Steps of linear warm-up, 0 ≤ warmup < steps.
    final : float
        The learning rate the cosine decays towards, 0 ≤ final ≤ peak.

    Returns
    -------
    numpy.ndarray, shape (steps,)
    """
    K = check_int("steps", steps, 1)
    peak = check_positive_float("peak", peak, allow_zero=True)
    warm = check_int("warmup", warmup, 0)
    if warm >= K:
        raise ValueError(f"warmup must be below steps={K}, got {warm}")
    final = check_positive_float("final", final, allow_zero=True)
    if final > peak:
        raise ValueError(f"final must not exceed peak={peak}, got {final}")
    k = np.arange(K, dtype=np.float64)
    decay = final + (peak - final) * 0.5 * (1 + np.cos(np.pi * (k - warm) / (K - warm)))
    return np.where(k < warm, peak * (k + 1) / max(warm, 1), decay)
