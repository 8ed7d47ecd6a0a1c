"""``torch.optim.Adam`` / ``AdamW`` for the finite networks (issue 34): the networks
the contract of :class:`nfd.schema.AdamRun` is derived for, and the torch optimizer on
an ensemble's parameter tensors in that contract's parameter groups.

The groups are the table of :class:`nfd.schema.AdamRun` (Tensor Programs VI,
Def. 6.1), for the network of eq. 1 of paper 002 with f = Vᵀh_L/n: U and V at lr
η_c(k) with eps ε/n and AdamW weight_decay λ; every W_ℓ at lr η_c(k)·√(T/(Ln)) with
eps ε·√(T/L)/n^{3/2} and weight_decay λ/√(T/(Ln)). Adam is elementwise, so one group
may hold a whole seed ensemble and all L hidden matrices as one (L, S, n, n)
tensor: each entry follows exactly the update torch gives it in a network of its
own.
"""

from __future__ import annotations

import torch

from nfd.schema import MS_BLOCK, AdamRun, Parametrization

__all__ = ["ADAM_NETWORK", "check_adam_network", "torch_adam"]

#: The architecture the Adam contract holds for: eq. 1 in the feature regime.
ADAM_NETWORK = {"style": "pre", "block": "one-layer", "scaling": "depth-mup",
                "regime": "feature"}


def check_adam_network(optimizer: str, **arch: str) -> None:
    """Refuse ``optimizer="adam"`` / ``"adamw"`` on a network other than
    :data:`ADAM_NETWORK` (``arch``: its ``style``, ``block``, ``scaling``,
    ``regime``) or paper 001 §6.3's block (:data:`nfd.schema.MS_BLOCK`, whose
    architecture checks hold it to depth-μP's stream in the feature regime);
    nothing to check with ``"sgd"``.

    Raises
    ------
    ValueError
        Naming the first argument that differs from :data:`ADAM_NETWORK`.
    """
    if optimizer == "sgd" or arch.get("block") == MS_BLOCK:
        return  # paper 001 §6.3's block: Adam's groups of Def. 6.1 (:mod:`._tp6`)
    for name, value in arch.items():
        if value != ADAM_NETWORK[name]:
            raise ValueError(
                f"{name}={value!r} is not available with optimizer={optimizer!r}: the "
                "per-group scaling of Adam (nfd.schema.AdamRun) is derived for the one-layer "
                "pre-activation depth-muP network in the feature regime (eq. 1); use "
                f"{name}={ADAM_NETWORK[name]!r} or optimizer='sgd'")


def torch_adam(params: dict[str, torch.Tensor], opt: AdamRun, *, width: int, depth: int,
               T: float, param: Parametrization = Parametrization()) -> torch.optim.Optimizer:
    """``torch.optim.Adam`` (or ``AdamW`` when ``opt.decoupled_decay``) on ``params``
    (``"U"``, ``"W"``, ``"V"``: the stored tensors, updated in place), one param group
    each with the ``eps``, ``weight_decay`` and ``lr_mult`` of
    :meth:`nfd.schema.AdamRun.groups` and its ``name``; ``betas`` of ``opt``,
    ``foreach=False`` (one tensor at a time: the memory of
    :func:`validation.network_memory_estimate`). Each parameter gets a zero dense
    ``grad`` to fill before a step; set each group's ``lr`` to η_c(k)·``lr_mult``.
    ``param``: the branch exponent and the trained families (a frozen one gets no
    group and no ``grad``)."""
    groups = []
    for name, group in opt.groups(width, depth, T, param).items():
        p = params[name]
        p.grad = torch.zeros_like(p)
        groups.append(dict(params=[p], name=name, **group))
    cls = torch.optim.AdamW if opt.decoupled_decay else torch.optim.Adam
    return cls(groups, lr=0.0, betas=opt.betas, foreach=False)
