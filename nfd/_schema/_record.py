"""What a run records beside its training numbers (issue 51): :class:`Record`, the
``record=`` of :func:`nfd.simulate`, :func:`nfd.linear_limit` and
``validation.train_resnet`` (as diffrax's ``saveat=``), and the check of a removed
keyword (:func:`removed_keywords`), which names the new form."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

from ._checks import check_int

__all__ = ["Record", "REMOVED_KEYWORDS", "check_record", "removed_keywords"]


@dataclass(frozen=True, eq=False)
class Record:
    """The held-out probes and the extra records of a run. Recording never changes a
    training number.

    Parameters
    ----------
    probes : (array_like (Q, d), array_like (Q,) or (Q, C)), optional
        Held-out inputs and targets, evaluated forward-only at ``probe_steps`` with
        the parameters of that step (:func:`nfd.simulate`).
    probe_steps : sequence of int, optional
        In 0..K (K = after the last update); default ≤ 17 evenly spaced, with 0
        and K (``nfd.schema.DEFAULT_PROBE_STEPS``). Only with ``probes``.
    eig_steps : sequence of int, optional
        Steps (0..K−1) after which to record the smallest eigenvalues of Σ_ℓ and
        Θ_ℓ (Assumption 1); default ≤ 5 evenly spaced steps in the limit, none in
        the networks (each costs storing the trajectories).
    paths : int
        The limit's particles whose h and g paths are kept (networks: 0).
    collapse : bool, optional
        Two-layer blocks: record ``internal_update`` and ``residual_update``
        (eq. 27, 33–34); default off in the limit, on in the networks.
    paired_probes : bool
        The limit's probe evaluations reuse one draw of their fresh normals: each
        evaluation conditions every probe's sources on the training history and adds one fresh
        standard normal per layer and particle (``nfd.simulate``), drawn anew at
        every evaluation by default and, with ``paired_probes=True``, drawn once per
        run (at the first evaluation, the same numbers as by default) and reused at
        every ``probe_steps`` entry; each error replica keeps its own. The normals
        are independent of the history either way, so each evaluation's law, and
        every training number, is unchanged: only the correlation across
        evaluations changes. It pairs only the probes' own part: each source's part
        explained by the training history is expressed in the training
        innovations, which change with the history, and the learned terms carry
        the particles' Monte Carlo error, so the noise of a change such as
        probe_f(K) − probe_f(0) falls little (its seed variance by 1.4–2.5 times
        at φ = id, d = 16, K·B = 12; by 0.8–1.3 times, none resolved, on Tensor
        Programs VI's block with gelu, d = 16, K·B = 32, P = 512–2048, 4 seeds:
        measured 2026-11-28). No effect in
        ``nfd.linear_limit`` (exact, no noise) or the networks.
    """

    probes: tuple | None = None
    probe_steps: Sequence[int] | None = None
    eig_steps: Sequence[int] | None = None
    paths: int = 0
    collapse: bool | None = None
    paired_probes: bool = False

    def __post_init__(self) -> None:
        if self.probes is not None and (not isinstance(self.probes, (tuple, list))
                                        or len(self.probes) != 2):
            raise TypeError("probes must be a pair (X_probe, y_probe)")
        check_int("paths", self.paths, 0)
        if self.collapse is not None and not isinstance(self.collapse, bool):
            raise TypeError(f"collapse must be True, False or None, got {self.collapse!r}")
        if not isinstance(self.paired_probes, bool):
            raise TypeError(f"paired_probes must be True or False, got "
                            f"{self.paired_probes!r}")


def check_record(record) -> Record:
    """``record`` if it is a :class:`Record`.

    Parameters
    ----------
    record : Record or None
        The argument (``None``: the default one).

    Returns
    -------
    Record

    Raises
    ------
    TypeError
        Anything else.
    """
    if record is None:
        return Record()
    if not isinstance(record, Record):
        raise TypeError(f"record must be nfd.Record(...), got {type(record).__name__}")
    return record


def _call(name: str, removed: dict) -> str:
    """``name(key=value, ...)`` of the removed keywords."""
    return f"{name}({', '.join(f'{k}={_show(v)}' for k, v in removed.items())})"


def _show(value) -> str:
    """``repr(value)``, or ``...`` when long (arrays)."""
    text = repr(value)
    return text if len(text) <= 40 and "\n" not in text else "..."


def _new_form(removed: dict, groups: dict) -> str:
    """The keywords of the new form of ``removed``: one per group (``groups``: old
    keyword → (new keyword, constructor, field)), e.g.
    ``optimizer=nfd.SGD(momentum=0.9)``; an old ``optimizer`` name picks the
    optimizer's class."""
    ctors: dict[str, str] = {}
    args: dict[str, list[str]] = {}
    name = removed.get("optimizer")
    if isinstance(name, str):
        ctors["optimizer"] = {"adam": "nfd.Adam", "adamw": "nfd.AdamW"}.get(name.lower(),
                                                                           "nfd.SGD")
        args["optimizer"] = []
    for key, value in removed.items():
        if key == "optimizer":
            continue
        new, ctor, field = groups[key]
        args.setdefault(new, [])
        if ctor is None:  # a plain rename
            args[new].append(_show(value))
            continue
        ctors.setdefault(new, ctor)
        args[new].append(f"{field}={_show(value)}")
    return ", ".join(f"{new}={ctors[new]}({', '.join(a)})" if new in ctors
                     else f"{new}={a[0]}" for new, a in args.items())


def removed_keywords(name: str, groups: dict) -> Callable:
    """Decorate a public function whose keywords ``groups`` were removed: a call
    with one raises ``TypeError`` naming the new form (0.x has no deprecation).

    Parameters
    ----------
    name : str
        The function as users call it, e.g. ``"simulate"``.
    groups : dict
        Old keyword → (new keyword, the new form's constructor or ``None`` for a
        plain rename, the constructor's field).

    Returns
    -------
    callable
        The decorator; the wrapped function keeps its signature.
    """
    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            removed = {k: kwargs[k] for k in kwargs if k in groups}
            if removed and isinstance(kwargs.get("optimizer"), str):  # the old name form
                removed = {"optimizer": kwargs["optimizer"], **removed}
            if removed:
                raise TypeError(f"{_call(name, removed)} was removed: pass "
                                f"{_new_form(removed, groups)}")
            return func(*args, **kwargs)
        return wrapper
    return decorate


#: The keywords of ``simulate``, ``linear_limit`` and ``train_resnet`` that issue 51
#: folded into ``optimizer=``, ``parametrization=``, ``record=`` and ``depth=``:
#: old keyword → (new keyword, constructor, field) for :func:`removed_keywords`.
REMOVED_KEYWORDS = {
    "momentum": ("optimizer", "nfd.SGD", "momentum"),
    "weight_decay": ("optimizer", "nfd.SGD", "weight_decay"),
    "betas": ("optimizer", "nfd.Adam", "betas"),
    "eps": ("optimizer", "nfd.Adam", "eps"),
    **{key: ("parametrization", "nfd.Parametrization", key) for key in (
        "branch_exponent", "trainable", "block", "hidden_lr", "first_layer_lr", "gamma0",
        "T", "scaling", "regime", "style", "block_multiplier", "layernorm", "lr_exponent")},
    **{key: ("record", "nfd.Record", key) for key in (
        "probes", "probe_steps", "eig_steps", "paths")},
    "record_collapse": ("record", "nfd.Record", "collapse"),
    "steps": ("depth", None, None),
}
