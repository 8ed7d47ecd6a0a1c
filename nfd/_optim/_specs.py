"""The optimizer specifications users pass as ``optimizer=`` (issue 51): ``nfd.SGD``,
``nfd.Adam`` and ``nfd.AdamW``, frozen dataclasses that read like ``torch.optim``'s
constructors less ``params`` and ``lr``.

The learning rate is not a field: it is ``eta_c`` (a number, a sequence or a
schedule) of :func:`nfd.simulate` and ``validation.train_resnet``, from which
depth-μP derives every parameter group's torch lr. Each class holds only the options
its torch optimizer has in nfd, so that a mismatch (``momentum`` with Adam, a decay
with plain Adam, ``betas`` with SGD) cannot be written, and checks its own fields
with the messages of the keywords it replaces. The run's validated optimizer, with
its schedule, is :class:`nfd.schema.SGDRun` / :class:`nfd.schema.AdamRun`
(:func:`resolve_optimizer`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Union

import numpy as np

from .._schema import check_positive_float
from ._optimizers import DEFAULT_BETAS, DEFAULT_EPS, _check_betas

__all__ = ["SGD", "Adam", "AdamW", "OptimizerSpec", "optimizer_from_dict",
           "optimizer_from_attrs"]


def _momentum(momentum) -> float:
    """β in [0, 1) (the message of ``check_sgd``)."""
    beta = check_positive_float("momentum", momentum, allow_zero=True)
    if beta >= 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r} (torch.optim.SGD's "
                         "momentum: 0.9 is usual)")
    return beta


class _Spec:
    """What the three specifications share: their name and the table conversions."""

    #: the optimizer's name in attrs and TOML (``optimizer`` / ``[optimizer] name``)
    name: ClassVar[str]

    def to_dict(self) -> dict:
        """The specification as a TOML table (``[optimizer]``): ``name`` and every field
        (``betas`` as a list).

        Returns
        -------
        dict
        """
        out = {"name": self.name}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class SGD(_Spec):
    """``torch.optim.SGD`` (dampening 0, no Nesterov) on every parameter group, at
    lr η_c(k)·γ₀²·n (paper 000, App. K.5 and L; :class:`nfd.schema.SGDRun`).

    Parameters
    ----------
    momentum : float
        β in [0, 1): torch's ``momentum``.
    weight_decay : float
        λ ≥ 0: the network's torch ``weight_decay`` is λ/(γ₀²n), so that without
        momentum every step multiplies the weights by 1 − η_c(k)·λ.
    """

    name: ClassVar[str] = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "momentum", _momentum(self.momentum))
        object.__setattr__(self, "weight_decay", check_positive_float(
            "weight_decay", self.weight_decay, allow_zero=True))


@dataclass(frozen=True)
class Adam(_Spec):
    """``torch.optim.Adam`` in depth-μP's parameter groups (Tensor Programs VI, Def. 6.1
    and Table 1; :class:`nfd.schema.AdamRun`). No ``weight_decay``: torch's L2 term has
    no width-independent meaning here (use :class:`AdamW`).

    Parameters
    ----------
    betas : (float, float)
        (β₁, β₂), each in [0, 1); torch's default (0.9, 0.999).
    eps : float
        ε ≥ 0 in the rescaled units of :class:`nfd.schema.AdamRun` (Θ(1) as n → ∞);
        torch's default 1e-8. ε = 0 is sign-like descent (NaN wherever a gradient
        entry is exactly 0, as in torch).
    """

    name: ClassVar[str] = "adam"
    betas: tuple[float, float] = DEFAULT_BETAS
    eps: float = DEFAULT_EPS

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", _check_betas(self.betas))
        object.__setattr__(self, "eps", check_positive_float("eps", self.eps, allow_zero=True))


@dataclass(frozen=True)
class AdamW(_Spec):
    """``torch.optim.AdamW`` in depth-μP's parameter groups (:class:`Adam`), with the
    decoupled decay λ: every step shrinks every trained parameter by 1 − η_c(k)·λ
    (torch's weight_decay of W is λ over W's lr factor).

    Parameters
    ----------
    betas : (float, float)
        (β₁, β₂), each in [0, 1); torch's default (0.9, 0.999).
    eps : float
        ε ≥ 0 (:class:`Adam`); default 1e-8.
    weight_decay : float
        λ ≥ 0. The default is 0, nfd's (torch's AdamW defaults to 1e-2).
    """

    name: ClassVar[str] = "adamw"
    betas: tuple[float, float] = DEFAULT_BETAS
    eps: float = DEFAULT_EPS
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", _check_betas(self.betas))
        object.__setattr__(self, "eps", check_positive_float("eps", self.eps, allow_zero=True))
        object.__setattr__(self, "weight_decay", check_positive_float(
            "weight_decay", self.weight_decay, allow_zero=True))


#: Any of the three specifications.
OptimizerSpec = Union[SGD, Adam, AdamW]
_BY_NAME = {cls.name: cls for cls in (SGD, Adam, AdamW)}


def check_optimizer_spec(optimizer, what: str = "optimizer") -> OptimizerSpec:
    """``optimizer`` if it is one of :class:`SGD`, :class:`Adam`, :class:`AdamW`.

    Parameters
    ----------
    optimizer : SGD, Adam or AdamW
        The argument.
    what : str
        Its name in the messages.

    Returns
    -------
    SGD, Adam or AdamW

    Raises
    ------
    TypeError
        Anything else, with the form to write (a name string included).
    """
    if isinstance(optimizer, (SGD, Adam, AdamW)):
        return optimizer
    if isinstance(optimizer, str) and optimizer.lower() in _BY_NAME:
        cls = _BY_NAME[optimizer.lower()].__name__
        raise TypeError(f"{what}={optimizer!r} was removed: pass {what}=nfd.{cls}() (its "
                        "options are the fields of nfd.SGD, nfd.Adam, nfd.AdamW)")
    raise TypeError(f"{what} must be nfd.SGD(...), nfd.Adam(...) or nfd.AdamW(...), got "
                    f"{optimizer!r}")


def optimizer_from_dict(table: dict) -> OptimizerSpec:
    """The specification of an ``[optimizer]`` TOML table: ``name`` (or ``type``) one
    of "sgd", "adam", "adamw" (any case), the other keys its fields.

    Parameters
    ----------
    table : dict
        E.g. ``{"name": "adamw", "betas": [0.9, 0.99], "weight_decay": 0.1}``.

    Returns
    -------
    SGD, Adam or AdamW

    Raises
    ------
    ValueError
        No or an unknown name, both ``name`` and ``type``, or a key that is not a
        field of that optimizer (naming its fields).
    """
    table = dict(table)
    if "name" in table and "type" in table:
        raise ValueError("[optimizer] has both name and type; give one")
    name = table.pop("name", table.pop("type", None))
    if not isinstance(name, str) or name.lower() not in _BY_NAME:
        raise ValueError(f"[optimizer] name must be one of {sorted(_BY_NAME)}, got {name!r}")
    cls = _BY_NAME[name.lower()]
    allowed = [f.name for f in fields(cls)]
    bad = sorted(set(table) - set(allowed))
    if bad:
        raise ValueError(f"[optimizer] key(s) {bad} are not options of nfd.{cls.__name__}; "
                         f"its options are {allowed}")
    if "betas" in table and isinstance(table["betas"], list):
        table["betas"] = tuple(table["betas"])
    return cls(**table)


def optimizer_from_attrs(attrs: dict) -> OptimizerSpec:
    """The optimizer of a result Dataset's ``attrs`` (``optimizer`` and its options,
    as :func:`nfd.simulate`, :func:`nfd.linear_limit` and ``validation.train_resnet``
    write them), also after a netCDF round trip.

    Parameters
    ----------
    attrs : dict
        ``ds.attrs``.

    Returns
    -------
    SGD, Adam or AdamW
    """
    cls = _BY_NAME[str(attrs.get("optimizer", "sgd"))]
    out = {}
    for f in fields(cls):
        if f.name in attrs:
            value = attrs[f.name]
            out[f.name] = (tuple(float(b) for b in np.ravel(value)) if f.name == "betas"
                           else float(value))
    return cls(**out)


def optimizer_keywords(spec: OptimizerSpec) -> dict:
    """The keywords of :func:`nfd.schema.check_optimizer` for ``spec``.

    Parameters
    ----------
    spec : SGD, Adam or AdamW
        The optimizer (anything else raises ``TypeError``).

    Returns
    -------
    dict
        ``optimizer`` (the name), ``momentum``, ``weight_decay``, ``betas`` and
        ``eps`` (``None`` for SGD, which has none).
    """
    spec = check_optimizer_spec(spec)
    return {"optimizer": spec.name, "momentum": getattr(spec, "momentum", 0.0),
            "weight_decay": getattr(spec, "weight_decay", 0.0),
            "betas": getattr(spec, "betas", None), "eps": getattr(spec, "eps", None)}
