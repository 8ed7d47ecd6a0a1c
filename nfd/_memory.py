"""Memory estimates, consulted before any large allocation."""

from __future__ import annotations

import os

import torch

from sde import GrowingGaussianDriver

from ._checks import check_choice
from ._sim_checks import BACKWARD_LIMITS

__all__ = ["memory_estimate", "available_memory", "ensure_fits"]


def memory_estimate(
    *,
    n_train: int,
    input_dim: int,
    steps: int,
    particles: int,
    batch_size: int = 1,
    probes: int = 0,
    paths: int = 0,
    dtype: torch.dtype = torch.float32,
    backward: str = "coupled",
) -> dict[str, int]:
    """Bytes :func:`nfd.simulate` allocates, by buffer.

    The NFD of Definition 1 (paper 002) is non-Markovian in the SGD step: step k
    needs every earlier trajectory, so the history grows like P·L·K·B.

    The two backward limits need the same history. ``backward="coupled"`` (ordinary
    backprop) estimates its response functions by Stein's lemma from the driver
    innovations, which are stored in either mode (the ``"drivers"`` entry), so it adds
    no history memory; it only adds a transient workspace of O(K·B) per layer-step
    (the float64 moments E[ξ F], their triangular solve and the drift weights, about
    3·K·B·8 bytes, counted in ``"workspace"``), negligible next to the P-sized
    buffers.

    Parameters
    ----------
    n_train : int
        Number of training trajectories K·B.
    input_dim : int
        d.
    steps : int
        L.
    particles : int
        P.
    batch_size, probes, paths : int
        B, number of probe inputs, number of recorded particle paths.
    dtype : torch.dtype
    backward : {"coupled", "decoupled"}
        The ``backward`` argument of :func:`nfd.simulate`.

    Returns
    -------
    dict
        Bytes per buffer and their ``"total"``.

    Raises
    ------
    ValueError
        If ``backward`` is not ``"coupled"`` or ``"decoupled"``.
    """
    check_choice("backward", backward, BACKWARD_LIMITS)
    item = torch.tensor([], dtype=dtype).element_size()
    P, L, N = particles, steps, n_train
    width = max(batch_size, probes, 1)
    est = {
        "phi_history": L * N * P * item,  # φ(h_ℓ) for ℓ < L
        "g_history": (L + 1) * N * P * item,  # g_ℓ for ℓ ≤ L
        "hL_history": N * P * item,
        "drivers": 2 * GrowingGaussianDriver.memory_bytes(L, P, N, item),
        "particles": P * (input_dim + 1) * item,
        # the current step's path and per-layer temporaries of the batch / probes
        "workspace": (L + 1 + 8) * width * P * item
        # coupled: Stein moments, their solve (float64) and the drift weights
        + (3 * N * width * 8 if backward == "coupled" else 0),
        "paths": 2 * paths * N * (L + 1) * item,
    }
    est["total"] = sum(est.values())
    return est


def available_memory(device: torch.device | str) -> int:
    """Bytes currently available on ``device``.

    CUDA: the free figure of ``torch.cuda.mem_get_info``. CPU: ``MemAvailable`` of
    ``/proc/meminfo`` when present (it counts reclaimable page cache), otherwise
    ``SC_PAGE_SIZE · SC_AVPHYS_PAGES``.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 2**63 - 1


def ensure_fits(
    required: int,
    device: torch.device | str,
    *,
    advice: str,
    what: str = "this run",
    parts: dict[str, int] | None = None,
    fraction: float = 0.9,
) -> None:
    """Raise ``MemoryError`` before allocating if ``required`` bytes exceed
    ``fraction`` of what is available; the message names the figure, the largest
    ``parts`` and ``advice`` (what to lower)."""
    free = available_memory(device)
    if required <= fraction * free:
        return
    detail = ""
    if parts:
        big = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
        detail = " (" + ", ".join(f"{k}: {v / 2**30:.2f} GiB" for k, v in big) + ")"
    raise MemoryError(
        f"{what} needs about {required / 2**30:.2f} GiB{detail} but only "
        f"{free / 2**30:.2f} GiB are free on {torch.device(device)}; {advice}"
    )
