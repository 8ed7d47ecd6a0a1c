"""Memory estimate of a finite-network ensemble (:func:`network_memory_estimate`, by
buffer, like :func:`nfd.memory_estimate`) and a clear error before allocating.

The dominant term is the weight tensor of the ensemble, ``S · L · n²`` entries per
weight family (one family for the one-layer blocks of eq. 1 of paper 002, two for
the two-layer blocks of eq. 6), doubled by the independent backward copy W̃ of the
decoupled (GIA) network, by the frozen initial weights of the collapse
observables (eq. 27, 34) and by the momentum buffers of ``torch.optim.SGD``
(one per parameter when momentum > 0; the decoupled copy needs none of its own,
since W̃ − W = a_k (W̃⁽⁰⁾ − W⁽⁰⁾)), or by ``torch.optim.Adam`` / ``AdamW``: two
state buffers, a dense gradient per parameter and the two temporaries of torch's
step on the largest one.
"""

from __future__ import annotations

import torch

from nfd.schema import (
    OPTIMIZERS,
    available_memory,
    check_choice,
    check_int,
    check_positive_float,
    check_sgd,
    ensure_fits,
    resolve_device_dtype,
)

__all__ = ["network_memory_estimate", "ensure_network_fits", "available_memory"]

_ADVICE = ("lower width (weights grow as seeds·depth·width²), depth or seeds, or "
           "batch_size / eig_steps / probes, or use backward='coupled'")


def network_memory_estimate(
    input_dim: int,
    *,
    width: int,
    depth: int,
    seeds: int = 1,
    batch_size: int = 1,
    n_steps: int = 1,
    backward: str = "coupled",
    block: str = "one-layer",
    style: str = "pre",
    record_collapse: bool = False,
    n_probes: int = 0,
    n_probe_steps: int = 0,
    eig_history: int = 0,
    n_eig_steps: int = 0,
    momentum: float = 0.0,
    optimizer: str = "sgd",
    dtype: torch.dtype | str = torch.float32,
    outputs: int = 1,
) -> dict[str, int]:
    """Bytes needed to train an ensemble of finite depth-μP ResNets, by buffer.

    Counts the weights of eq. 1 (or eq. 6 for two-layer blocks) of paper 002 for
    ``seeds`` networks at once, the backward copy W̃ of the decoupled network
    (Corollary 1), the frozen initial weights of the collapse observables
    (eq. 27, 34), the momentum buffers (one per parameter when ``momentum`` > 0)
    or Adam's state and dense gradients, the per-layer activation/gradient
    buffers of one SGD step and its rank-B gradient factors, the data stream, the
    records, and the stored trajectories and Gram matrices of the
    smallest-eigenvalue records (Figure 6).

    Parameters
    ----------
    input_dim : int
        Input dimension d ≥ 1.
    width, depth : int
        n ≥ 1 and L ≥ 1.
    seeds : int
        Ensemble size S ≥ 1.
    batch_size, n_steps : int
        B ≥ 1 samples per SGD step and K ≥ 0 steps.
    backward : {"coupled", "decoupled"}
    block : {"one-layer", "two-layer", "post-nonlin-ms"}
        ``"post-nonlin-ms"``: paper 001 §6.3's block (style ``"post"``), one weight
        family, its u_ℓ and (pre-LayerNorm) z_ℓ counted as post-activation's u_ℓ and
        the cached φ.
    style : {"pre", "post"}
    record_collapse : bool
        Whether the frozen initial weights of eq. 27/34 are kept.
    n_probes, n_probe_steps : int
        Probe inputs and probe evaluations (≥ 0).
    eig_history : int
        Number M ≥ 0 of stored trajectories for the eigenvalue records
        ((last eig step + 1) · B), 0 for none.
    n_eig_steps : int
        Number of eigenvalue records (≥ 0).
    momentum : float
        β ≥ 0 of ``torch.optim.SGD``: β > 0 adds a buffer of the size of U, v and
        every weight matrix (``"momentum buffers"``).
    optimizer : {"sgd", "adam", "adamw"}
        ``torch.optim.Adam`` / ``AdamW`` (``foreach=False``) keeps ``exp_avg`` and
        ``exp_avg_sq`` of every parameter (``"Adam state"``, two buffers of the
        size of U, V and every weight matrix), the dense gradient it steps on
        (``"dense gradients"``, one more) and, during the step of the largest
        parameter, √v and its quotient (``"Adam step temporaries"``, two of the size
        of one weight family's (L, S, n, n) tensor, or of U or V if larger).
    dtype : torch.dtype or {"float32", "float64"}
    outputs : int
        C ≥ 1 outputs: the readout V (n, C), its momentum buffer, the targets and
        the records of f, χ and the probe outputs grow with C.

    Returns
    -------
    dict
        Bytes per buffer and their ``"total"`` (a slight over-estimate of the peak),
        the shape of :func:`nfd.memory_estimate`.

    Raises
    ------
    TypeError, ValueError
        Naming the argument (e.g. a negative count).
    """
    d = check_int("input_dim", input_dim, 1)
    n, L = check_int("width", width, 1), check_int("depth", depth, 1)
    S, B = check_int("seeds", seeds, 1), check_int("batch_size", batch_size, 1)
    K = check_int("n_steps", n_steps, 0)
    Q, nq = check_int("n_probes", n_probes, 0), check_int("n_probe_steps", n_probe_steps, 0)
    M, ne = check_int("eig_history", eig_history, 0), check_int("n_eig_steps", n_eig_steps, 0)
    check_choice("backward", backward, ("coupled", "decoupled"))
    check_choice("block", block, ("one-layer", "two-layer", "post-nonlin-ms"))
    check_sgd(0.0, 1, momentum=momentum)  # β in [0, 1), as train_resnet checks it
    check_choice("style", style, ("pre", "post"))
    beta = check_positive_float("momentum", momentum, allow_zero=True)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    C = check_int("outputs", outputs, 1)
    item = torch.empty((), dtype=resolve_device_dtype("cpu", dtype)[1]).element_size()
    families = 2 if block == "two-layer" else 1
    collapse = bool(record_collapse) and block == "two-layer"
    copies = 1 + (backward == "decoupled") + collapse
    # h_ℓ, g_ℓ and the cached φ of every layer; post-activation keeps u_ℓ, two-layer
    # blocks x_ℓ; the rank-B gradient factors of every weight family; temporaries.
    acts = 3 * (L + 1) * S * B * n + families * L * S * B * n
    if style == "post" or block == "two-layer":
        acts += (L + 1) * S * B * n
    temps = 6 * S * max(B, Q) * n + 2 * S * n * d
    out = {
        "weights": S * L * n * n * families * copies * item,
        "input and readout weights (U, v)": S * n * (d + C) * item,
        "activation buffers": (acts + temps) * item,
        "data stream": (K * B * (d + C) + Q * (d + C)) * item,
        # records are float64 on the host (converted once at the end)
        "records": 8 * (K * S * B * (1 + 2 * C) + K * S * (L + 1) * 2
                        + (2 * K * S * L if collapse else 0)
                        + S * nq * Q * (1 + C) + S * ne * (L + 1) * 2),
    }
    params = S * (L * n * n * families + n * (d + C))  # U, V and every weight matrix
    if beta > 0:
        out["momentum buffers"] = params * item
    if optimizer != "sgd":
        out["Adam state"] = 2 * params * item
        out["dense gradients"] = params * item
        # √v and √v/√(1−β₂ᵗ) of the largest parameter: U (S, n, d), V or one family
        out["Adam step temporaries"] = 2 * S * n * max(L * n, d, C) * item
    if M:
        # stored feature/gradient trajectories + float64 Gram matrices and eigvalsh work
        out["eigenvalue history"] = (2 * L + 1) * S * M * n * item + 3 * (L + 1) * S * M * M * 8
    out["total"] = sum(out.values())
    return out


def ensure_network_fits(parts: dict[str, int], device: torch.device | str, *,
                        what: str) -> None:
    """Raise ``MemoryError`` naming the largest buffers and what to lower when the
    ``"total"`` of :func:`network_memory_estimate` exceeds 90 % of what is free."""
    ensure_fits(parts["total"], device, what=what, advice=_ADVICE,
                parts={k: v for k, v in parts.items() if k != "total"})
