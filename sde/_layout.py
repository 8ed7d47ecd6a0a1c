"""The layout of stacked operands: G slabs, each laid out as a tensor of its own.

A :class:`~sde.DriverGroup` makes each member's products on its own slab of a stacked
tensor, and BLAS kernels give a slab the bits it gets alone only when it is laid out
as a tensor of its own would be (row-major, aligned).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

__all__ = ["grouped", "ALIGN", "CUDA_ALIGN"]

#: Bytes by which every member's slab of a grouped tensor (:func:`grouped`) is aligned
#: on the CPU, as torch's CPU allocator aligns a tensor of its own.
ALIGN = 64
#: The same on CUDA, whose caching allocator aligns a tensor of its own to 512 bytes
#: (cuBLAS may choose its kernel by an operand's alignment).
CUDA_ALIGN = 512


def grouped(G: int, shape: Sequence[int], dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """An uninitialised ``(G, *shape)`` tensor whose G slabs are contiguous and each start
    on an :data:`ALIGN`-byte boundary (:data:`CUDA_ALIGN` on CUDA), as a tensor of its
    own does.

    BLAS kernels take other paths on operands that are not so aligned (measured with
    torch 2.13 on CPU: ``mv`` of a (k, k) matrix and a vector that starts 8 bytes off
    a 16-byte boundary differs in the last bits from the aligned one for k ≥ 9), so
    a member's slab of a stacked tensor gives the bits it gets alone only when
    aligned: give :class:`~sde.DriverGroup` its columns and moments in such a tensor.

    Parameters
    ----------
    G : int
        Members (slabs).
    shape : sequence of int
        The shape of one slab.
    dtype : torch.dtype
        Their dtype.
    device : torch.device
        Their device.

    Returns
    -------
    Tensor
        Shape ``(G, *shape)``; slab g is ``out[g]``, contiguous.
    """
    if G == 1:  # a tensor of its own is laid out so already
        return torch.empty((1, *shape), dtype=dtype, device=device)
    align = CUDA_ALIGN if torch.device(device).type == "cuda" else ALIGN
    slab, strides = _strides(tuple(shape), dtype.itemsize, align)
    return torch.empty(G * slab, dtype=dtype, device=device).as_strided(
        (G, *shape), (slab, *strides))


@functools.lru_cache(maxsize=256)
def _strides(shape: tuple[int, ...], itemsize: int,
             align: int) -> tuple[int, tuple[int, ...]]:
    """The elements between slabs (the slab's size rounded up to ``align`` bytes) and
    the row-major strides within one, for :func:`grouped` (made once per shape: a
    layer-step asks for the same few shapes many times)."""
    numel = math.prod(shape)
    slab = -(-numel * itemsize // align) * align // itemsize
    return slab, tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
