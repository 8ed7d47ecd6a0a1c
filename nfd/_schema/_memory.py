"""Free memory on a device, and the check every large run makes before it allocates."""

from __future__ import annotations

import os

import torch

__all__ = ["available_memory", "ensure_fits"]


def available_memory(device: torch.device | str) -> int:
    """Bytes currently available on ``device``.

    CUDA: the free figure of ``torch.cuda.mem_get_info`` plus the blocks torch's
    caching allocator holds for this process but no tensor uses (reserved −
    allocated): they are free to the next run, which would otherwise be refused
    after a large earlier run in the same process. CPU: ``MemAvailable`` of
    ``/proc/meminfo`` when present (it counts reclaimable page cache), otherwise
    ``SC_PAGE_SIZE · SC_AVPHYS_PAGES`` (2⁶³ − 1 where neither can be read).

    Parameters
    ----------
    device : torch.device or str
        A CUDA device, or any other device, which is taken as the host's memory.

    Returns
    -------
    int
    """
    device = torch.device(device)
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0]) + int(cached)
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
    ``parts`` and ``advice`` (what to lower).

    Parameters
    ----------
    required : int
        Bytes the run will allocate.
    device : torch.device or str
        Where it allocates them (:func:`available_memory`).
    advice : str
        What to lower, ending the message.
    what : str
        The run, as the message names it.
    parts : dict of str to int, optional
        Bytes by buffer; the message names the three largest.
    fraction : float
        The share of the available memory a run may take.

    Raises
    ------
    MemoryError
        When ``required`` exceeds ``fraction`` of :func:`available_memory`.
    """
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
