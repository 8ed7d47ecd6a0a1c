"""Memory estimate for finite-network ensembles and a clear error before allocating.

The dominant term is the weight tensor of the ensemble, ``S · L · n²`` entries per
weight family (one family for the one-layer blocks of eq. 1 of paper 002, two for
the two-layer blocks of eq. 6), doubled by the independent backward copy W̃ of the
decoupled (GIA) network and by the frozen initial weights of the collapse
observables (eq. 27, 34).
"""

from __future__ import annotations

import torch

from nfd._memory import available_memory, ensure_fits

__all__ = ["memory_estimate", "available_memory", "check_memory"]


def _breakdown(
    input_dim: int,
    width: int,
    depth: int,
    *,
    seeds: int,
    batch_size: int,
    n_steps: int,
    backward: str,
    block: str,
    style: str,
    record_collapse: bool,
    n_probes: int,
    n_probe_steps: int,
    eig_history: int,
    n_eig_steps: int,
    itemsize: int,
) -> dict[str, int]:
    S, L, n, d, B, K = seeds, depth, width, input_dim, batch_size, n_steps
    families = 2 if block == "two-layer" else 1
    copies = 1 + (backward == "decoupled") + (record_collapse and block == "two-layer")
    weights = S * L * n * n * families * copies
    # h_ℓ, g_ℓ buffers and cached φ; post-activation keeps the pre-activations u_ℓ,
    # two-layer blocks the internal representations x_ℓ; ~6 (S, B, n) temporaries.
    acts = 3 * (L + 1) * S * B * n  # h_ℓ, g_ℓ and the cached φ(·) of every layer
    if style == "post" or block == "two-layer":
        acts += (L + 1) * S * B * n
    temps = 6 * S * max(B, n_probes) * n + 2 * S * n * d
    data = K * B * (d + 1) + n_probes * (d + 1)
    out = {
        "weights": weights * itemsize,
        "input and readout weights (U, v)": S * n * (d + 1) * itemsize,
        "activation buffers": (acts + temps) * itemsize,
        "data stream": data * itemsize,
        # records are float64 on the host (converted once at the end)
        "records": 8 * (K * S * B * 3 + K * S * (L + 1) * 2
                        + (2 * K * S * L if record_collapse else 0)
                        + S * n_probe_steps * n_probes * 2
                        + S * n_eig_steps * (L + 1) * 2),
    }
    if eig_history:
        M = eig_history
        # stored feature/gradient trajectories + float64 Gram matrices and eigvalsh work
        out["eigenvalue history"] = (
            (2 * L + 1) * S * M * n * itemsize + 3 * (L + 1) * S * M * M * 8
        )
    return out


def memory_estimate(
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
    dtype: torch.dtype = torch.float32,
) -> int:
    """Bytes needed to train an ensemble of finite depth-μP ResNets.

    Counts the weights of eq. 1 (or eq. 6 for two-layer blocks) of paper 002 for
    ``seeds`` networks at once, the backward copy W̃ of the decoupled network
    (Corollary 1), the frozen initial weights of the collapse observables
    (eq. 27, 34), the per-layer activation/gradient buffers of one SGD step, the
    data stream, the records, and the stored trajectories and Gram matrices of the
    smallest-eigenvalue records (Figure 6).

    Parameters
    ----------
    input_dim : int
        Input dimension d.
    width, depth : int
        n and L.
    seeds : int
        Ensemble size S.
    batch_size, n_steps : int
        B samples per SGD step and K steps.
    backward : {"coupled", "decoupled"}
    block : {"one-layer", "two-layer"}
    style : {"pre", "post"}
    record_collapse : bool
        Whether the frozen initial weights of eq. 27/34 are kept.
    n_probes, n_probe_steps : int
        Probe inputs and probe evaluations.
    eig_history : int
        Number M of stored trajectories for the eigenvalue records
        ((last eig step + 1) · B), 0 for none.
    n_eig_steps : int
        Number of eigenvalue records.
    dtype : torch.dtype
        float32 or float64.

    Returns
    -------
    int
        Estimated peak bytes (a slight over-estimate).
    """
    itemsize = torch.empty((), dtype=dtype).element_size()
    parts = _breakdown(
        input_dim, width, depth, seeds=seeds, batch_size=batch_size, n_steps=n_steps,
        backward=backward, block=block, style=style, record_collapse=record_collapse,
        n_probes=n_probes, n_probe_steps=n_probe_steps, eig_history=eig_history,
        n_eig_steps=n_eig_steps, itemsize=itemsize,
    )
    return int(sum(parts.values()))


def check_memory(
    nbytes: int,
    device: torch.device | str,
    *,
    what: str,
    parts: dict[str, int] | None = None,
    fraction: float = 0.9,
) -> None:
    """Raise ``MemoryError`` when ``nbytes`` exceeds ``fraction`` of what is available.

    Parameters
    ----------
    nbytes : int
        Estimated need (see :func:`memory_estimate`).
    device : torch.device or str
    what : str
        What is being allocated (named in the message).
    parts : dict, optional
        Breakdown named in the message.
    fraction : float
        Usable share of the available memory.

    Raises
    ------
    MemoryError
        Naming the estimate, the available figure and what to lower.
    """
    ensure_fits(
        nbytes, device, what=what, parts=parts, fraction=fraction,
        advice="lower width (weights grow as seeds·depth·width²), depth or seeds, or "
        "batch_size / eig_steps / probes, or use backward='coupled'",
    )
