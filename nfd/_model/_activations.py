"""Activation functions φ, their derivatives φ′, and Gaussian pair moments.

Every model in the package (the SDE limits in :mod:`nfd`, the finite networks in
:mod:`validation`) obtains φ and φ′ from :func:`get_activation`, so a name means the
same function everywhere.

The Gaussian pair moments ``E[φ(u)φ(u')]`` and ``E[φ'(u)φ'(u')]`` for
``(u, u') ~ N(0, [[c11, c12], [c12, c22]])`` are the right-hand sides of the
deterministic covariance ODEs of Propositions 3 and 6 of Yao, Wu & Gao (paper 002).
They are exact (closed form) for ``relu``, ``abs``, ``erf`` and ``identity`` and
computed by tensor-product Gauss–Hermite quadrature for every other φ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

__all__ = ["Activation", "get_activation", "ACTIVATIONS"]

TensorFn = Callable[[torch.Tensor], torch.Tensor]
OutFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@dataclass(frozen=True)
class Activation:
    """An activation φ with its derivative φ′.

    Parameters
    ----------
    name : str
        Name recorded in result ``attrs``.
    phi, dphi : callable
        Element-wise torch functions for φ and φ′.
    closed_form : str or None
        Key of the exact Gaussian pair moments, or ``None`` for Gauss–Hermite.
    _phi_out, _dphi_out : callable or None
        Private ``f(x, out)`` forms writing φ(x), φ′(x) into ``out``, which the
        built-in activations hold: the particle loop of :func:`nfd.simulate` uses
        them (through :meth:`phi_into`, :meth:`dphi_into`) to avoid one allocation
        of size P per layer, which costs page faults on the CPU; without them φ is
        evaluated and copied.
    """

    name: str
    phi: TensorFn
    dphi: TensorFn
    closed_form: str | None = None
    _phi_out: OutFn | None = field(default=None, repr=False, compare=False)
    _dphi_out: OutFn | None = field(default=None, repr=False, compare=False)

    def phi_into(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """φ(x) written into ``out`` (allocation-free for the built-ins).

        Parameters
        ----------
        x : Tensor
            The pre-activations.
        out : Tensor
            Where φ(x) goes: a tensor of ``x``'s shape and dtype. Without a
            private ``_phi_out`` form, ``phi(x)`` is evaluated and copied into it.

        Returns
        -------
        Tensor
            ``out``.
        """
        return self._phi_out(x, out) if self._phi_out else out.copy_(self.phi(x))

    def dphi_into(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """φ′(x) written into ``out`` (allocation-free for the built-ins).

        Parameters
        ----------
        x : Tensor
            The pre-activations.
        out : Tensor
            Where φ′(x) goes: a tensor of ``x``'s shape and dtype. Without a
            private ``_dphi_out`` form, ``dphi(x)`` is evaluated and copied into it.

        Returns
        -------
        Tensor
            ``out``.
        """
        return self._dphi_out(x, out) if self._dphi_out else out.copy_(self.dphi(x))

    def pair_moments(
        self, c11: np.ndarray, c22: np.ndarray, c12: np.ndarray, *, nodes: int = 80
    ) -> tuple[np.ndarray, np.ndarray]:
        """Gaussian pair moments ``E[φ(u)φ(u')]`` and ``E[φ'(u)φ'(u')]``.

        These are the integrands of the covariance ODE ``dC/dt = E[φ(u)φ(u')]``
        (paper 002, Prop. 3) and of the backward second moment
        ``-dΘ/dt = E[φ'(u)φ'(u')] Θ`` (paper 002, Prop. 6, under GIA).

        Parameters
        ----------
        c11, c22, c12 : ndarray
            Broadcastable variances and covariance of ``(u, u')``.
        nodes : int
            Gauss–Hermite nodes per dimension when φ has no closed form.

        Returns
        -------
        (ndarray, ndarray)
            ``E[φ(u)φ(u')]`` and ``E[φ'(u)φ'(u')]`` with the broadcast shape.
        """
        c11, c22, c12 = np.broadcast_arrays(
            np.asarray(c11, float), np.asarray(c22, float), np.asarray(c12, float)
        )
        if self.closed_form is not None:
            return _CLOSED_FORMS[self.closed_form](c11, c22, c12)
        return _gauss_hermite_pair(self.phi, self.dphi, c11, c22, c12, nodes)


def _correlation(c11, c22, c12):
    norm = np.sqrt(np.maximum(c11 * c22, 0.0))
    rho = np.divide(c12, norm, out=np.zeros_like(c12), where=norm > 0)
    return norm, np.clip(rho, -1.0, 1.0)


def _relu_moments(c11, c22, c12):
    # Arc-cosine kernel of order 1 (Cho & Saul 2009) and of order 0 for φ' = 1{u>0}.
    norm, rho = _correlation(c11, c22, c12)
    theta = np.arccos(rho)
    k = norm / (2 * np.pi) * (np.sin(theta) + (np.pi - theta) * np.cos(theta))
    return k, (np.pi - theta) / (2 * np.pi)


def _abs_moments(c11, c22, c12):
    # |u| = relu(u) + relu(-u): E|u||u'| = (2/π)·√(c11 c22)·(sin θ + (π/2 − θ) cos θ);
    # φ' = sign: E[sign u sign u'] = 1 − 2θ/π.
    norm, rho = _correlation(c11, c22, c12)
    theta = np.arccos(rho)
    k = 2 / np.pi * norm * (np.sin(theta) + (np.pi / 2 - theta) * np.cos(theta))
    return k, 1 - 2 * theta / np.pi


def _erf_moments(c11, c22, c12):
    # Williams (1997): E[erf(u) erf(u')] = (2/π) arcsin(2 c12 / √((1+2c11)(1+2c22))).
    a = (1 + 2 * c11) * (1 + 2 * c22)
    k = 2 / np.pi * np.arcsin(np.clip(2 * c12 / np.sqrt(a), -1.0, 1.0))
    # φ'(u) = (2/√π) exp(−u²): E = (4/π) / √((1+2c11)(1+2c22) − 4 c12²).
    kd = 4 / np.pi / np.sqrt(np.maximum(a - 4 * c12**2, 1e-300))
    return k, kd


def _identity_moments(c11, c22, c12):
    return c12.copy(), np.ones_like(c12)


_CLOSED_FORMS = {
    "relu": _relu_moments,
    "abs": _abs_moments,
    "erf": _erf_moments,
    "identity": _identity_moments,
}


def _gauss_hermite_pair(phi, dphi, c11, c22, c12, nodes):
    """Tensor-product Gauss–Hermite rule for ``E[ψ(u)ψ(u')]`` (ψ = φ and φ′)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-x²/2)
    w = w / np.sqrt(2 * np.pi)
    a = np.sqrt(np.maximum(c11, 0.0))[..., None, None]
    # Cholesky of the 2×2 covariance: u = a z1, u' = b z1 + c z2.
    safe_a = np.where(a > 0, a, 1.0)
    b = np.where(a > 0, c12[..., None, None] / safe_a, 0.0)
    c = np.sqrt(np.maximum(c22[..., None, None] - b**2, 0.0))
    z1, z2 = x[:, None], x[None, :]
    u = a * z1  # constant along z2: φ(u) on (…, nodes, 1), broadcast in the product
    up = b * z1 + c * z2
    ww = w[:, None] * w[None, :]
    out = []
    for f in (phi, dphi):
        fu = f(torch.from_numpy(u)).numpy()
        fup = f(torch.from_numpy(up)).numpy()
        out.append((fu * fup * ww).sum(axis=(-1, -2)))
    return out[0], out[1]


def _relu_grad(x: torch.Tensor) -> torch.Tensor:
    return (x > 0).to(x.dtype)


def _gelu_grad(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(x / _SQRT2)) + x * _INV_SQRT_2PI * torch.exp(-0.5 * x * x)


def _erf_grad(x: torch.Tensor) -> torch.Tensor:
    return (2 / math.sqrt(math.pi)) * torch.exp(-x * x)


def _tanh_grad(x: torch.Tensor) -> torch.Tensor:
    return 1 - torch.tanh(x) ** 2


def _tanh_grad_out(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x, out=out).square_().neg_().add_(1)


def _erf_grad_out(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(x, x, out=out).neg_().exp_().mul_(2 / math.sqrt(math.pi))


#: The built-in activations by name, what :func:`get_activation` resolves a string
#: against; the ones with a ``closed_form`` have exact Gaussian pair moments.
ACTIVATIONS: dict[str, Activation] = {
    "relu": Activation("relu", torch.relu, _relu_grad, "relu",
                       lambda x, out: torch.clamp_min(x, 0, out=out),
                       lambda x, out: torch.gt(x, 0, out=out)),
    "tanh": Activation("tanh", torch.tanh, _tanh_grad, None,
                       lambda x, out: torch.tanh(x, out=out), _tanh_grad_out),
    "erf": Activation("erf", torch.erf, _erf_grad, "erf",
                      lambda x, out: torch.erf(x, out=out), _erf_grad_out),
    "gelu": Activation("gelu", torch.nn.functional.gelu, _gelu_grad),
    "softplus": Activation("softplus", torch.nn.functional.softplus, torch.sigmoid),
    "abs": Activation("abs", torch.abs, torch.sign, "abs",
                      lambda x, out: torch.abs(x, out=out),
                      lambda x, out: torch.sign(x, out=out)),
    "identity": Activation("identity", lambda x: x, torch.ones_like, "identity",
                           lambda x, out: out.copy_(x), lambda x, out: out.fill_(1)),
}


def _autograd_derivative(phi: TensorFn) -> TensorFn:
    """φ′ of an element-wise φ by autograd, marked ``by_autograd`` (which a captured
    CUDA graph cannot replay: ``nfd.graph_replay`` refuses it)."""
    def dphi(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            xr = x.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(phi(xr).sum(), xr)
        return grad

    dphi.by_autograd = True
    return dphi


#: numpy ufuncs that name a built-in activation (``np.abs`` is ``np.absolute``).
_UFUNC_BUILTINS = {"tanh": "tanh", "erf": "erf", "absolute": "abs"}


def _from_ufunc(ufunc: np.ufunc) -> Activation:
    """A unary numpy (or scipy.special) ufunc as the matching torch activation: a
    built-in where one has its name (np.tanh → ``"tanh"``), else ``torch.<name>``
    with its autograd derivative; refused with a ``TypeError`` otherwise."""
    name = ufunc.__name__
    if ufunc.nin == 1 and ufunc.nout == 1:
        if name in _UFUNC_BUILTINS:
            return ACTIVATIONS[_UFUNC_BUILTINS[name]]
        fn = getattr(torch, name, None)
        if callable(fn):
            return Activation(name, fn, _autograd_derivative(fn))
    raise TypeError(
        f"activation=numpy.{name} has no torch counterpart: φ must be an element-wise "
        f"torch function (e.g. torch.tanh) or one of {sorted(ACTIVATIONS)}"
    )


def _check_callable(act: Activation) -> Activation:
    """Evaluate φ and φ′ on a small tensor: a function that is not element-wise torch
    (e.g. one calling numpy) is refused here with a ``TypeError`` that says what to
    pass, not deep inside a run."""
    x = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64)
    for what, fn in (("activation", act.phi), ("activation_derivative", act.dphi)):
        try:
            out = fn(x)
        except Exception as err:  # noqa: BLE001 - any failure means the same advice
            raise TypeError(
                f"{what} {act.name!r} failed on a torch tensor ({type(err).__name__}: {err}); "
                "pass an element-wise torch function (e.g. torch.tanh, not numpy.tanh)"
            ) from err
        if not isinstance(out, torch.Tensor) or out.shape != x.shape:
            raise TypeError(
                f"{what} {act.name!r} must map a torch tensor to a tensor of the same "
                f"shape, got {type(out).__name__}; pass an element-wise torch function"
            )
    return act


def get_activation(
    activation: str | Activation | TensorFn, derivative: TensorFn | None = None
) -> Activation:
    """Resolve an activation given by name, as an :class:`Activation`, or as a callable.

    Parameters
    ----------
    activation : str, Activation or callable
        One of ``relu, tanh, erf, gelu, softplus, abs, identity``, an
        :class:`Activation`, an element-wise torch function φ, or a unary numpy
        ufunc with a torch counterpart (``np.tanh`` is the built-in ``"tanh"``;
        ``np.sin`` becomes ``torch.sin``).
    derivative : callable, optional
        φ′ for a callable φ; obtained by autograd when omitted.

    Returns
    -------
    Activation

    Raises
    ------
    ValueError
        For an unknown name or an object that is neither a name nor callable.
    TypeError
        For a numpy ufunc without a torch counterpart, or a callable that fails on
        (or does not return) a torch tensor of its input's shape.
    """
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str):
        try:
            return ACTIVATIONS[activation]
        except KeyError:
            raise ValueError(
                f"activation={activation!r} is not known; choose one of "
                f"{sorted(ACTIVATIONS)} or pass a callable φ"
            ) from None
    if isinstance(activation, np.ufunc) and derivative is None:
        return _from_ufunc(activation)
    if callable(activation):
        if derivative is not None and not callable(derivative):
            raise ValueError("activation_derivative must be callable")
        name = getattr(activation, "__name__", "custom")
        return _check_callable(
            Activation(name, activation, derivative or _autograd_derivative(activation)))
    raise ValueError(
        f"activation must be a name or a callable, got {type(activation).__name__}"
    )
