"""Bytes :func:`nfd.simulate` allocates (:func:`memory_estimate`), consulted before it
allocates anything."""

from __future__ import annotations

import torch

from sde import GrowingGaussianDriver

from .._schema import REMOVED_KEYWORDS, check_choice, check_int, removed_keywords, resolve_device_dtype
from .._model import Parametrization, check_parametrization
from .._optim import (BACKWARD_LIMITS, BLOCKS, SGDRun, OptimizerSpec, SGDSpec, check_optimizer,
                      optimizer_keywords)
from ._checks import check_limit_parametrization
from ._replay import replaying
from ._streams import history_rows

__all__ = ["memory_estimate"]


@removed_keywords("memory_estimate", {k: v for k, v in REMOVED_KEYWORDS.items()
                                       if k not in ("probes", "paths")})
def memory_estimate(
    *,
    n_train: int,
    input_dim: int,
    depth: int,
    particles: int,
    batch_size: int = 1,
    probes: int = 0,
    paths: int = 0,
    dtype: torch.dtype = torch.float32,
    backward: str = "coupled",
    eta_c=None,
    optimizer: OptimizerSpec = SGDSpec(),
    parametrization: Parametrization = Parametrization(),
    outputs: int = 1,
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

    Under :func:`nfd.graph_replay` (called inside the block) it adds the static passes'
    buffers (``"replay"``: the new block's φ and g, the probes' normals, float64
    weights over all the history's rows).

    This is one run. Its error replicas (``error_replicas``) are runs of their own
    ``error_replica_particles``: ``simulate`` runs them in lockstep with the run when
    the estimates of all of them fit in memory together, and one after the other
    otherwise (the numbers are the same either way).

    Parameters
    ----------
    n_train : int
        Number of training trajectories K·B.
    input_dim : int
        d.
    depth : int
        L.
    particles : int
        P.
    batch_size, probes, paths : int
        B, number of probe inputs, number of recorded particle paths.
    dtype : torch.dtype
        As for :func:`nfd.simulate`.
    backward : {"coupled", "decoupled"}
        The ``backward`` argument of :func:`nfd.simulate`.
    eta_c, optimizer
        The learning rate and optimizer of :func:`nfd.simulate` (``eta_c=None``: one
        learning rate). Anything but plain SGD (a schedule, momentum, weight decay,
        γ₀ ≠ 1) adds the ``"optimizer"`` entry: the recurrence's coefficient vectors
        (2·K float64 on the host) and each step's trajectory weights (K·B in
        float64 and in ``dtype``), a few bytes per trajectory. ``nfd.Adam`` /
        ``nfd.AdamW`` add the ``"adam_states"`` entry (``nfd._simulation._adam``):
        the dense states A_ℓ, m_ℓ, v_ℓ of every layer, 3·L·P² numbers, two P×P
        temporaries of a layer's update (its gradient and √v̂ + ε), and the (P, d)
        and (P, C) states of U and V. At L = 8 in float32 that is 1.6 GB at
        P = 4096 and 6.7 GB at P = 8192.
    parametrization : nfd.Parametrization
        As for :func:`nfd.simulate` (validated the same way). ``block="two-layer"``
        (``nfd._simulation._twolayer``): four history streams (h_{ℓ−1}, φ(x_ℓ), a_ℓ,
        g_ℓ) and four drivers per layer instead of two of each, so the history,
        innovation and driver entries double (``"phi_history"`` then counts
        h_{ℓ−1}, φ(x_ℓ) and a_ℓ), plus the block's x_ℓ (L·B·P).
        ``block="post-nonlin-ms"`` (``nfd._simulation._msblock``): three history
        streams (h_{ℓ−1}, a_ℓ in ``"phi_history"``; g_ℓ) and two drivers with their
        own innovations, plus the block's x_ℓ. Neither the branch
        exponent nor ``trainable`` changes a buffer: every α has the same drivers
        and history, and a frozen U or v keeps its stored initial value.
    outputs : int
        C, the number of outputs (columns of vector mse targets, classes of
        ``loss="cross_entropy"``). C ≥ 2 adds the ``"outputs"`` entry: the C − 1
        further readout columns, the current readout V(k) (P, C), the (B or Q, C, P)
        products of the outputs and the trajectories' C coefficients (in float64
        and ``dtype``).

    Returns
    -------
    dict
        Bytes per buffer and their ``"total"``.

    Raises
    ------
    TypeError, ValueError
        For a count that is not an integer of the range ``simulate`` accepts
        (``n_train, input_dim, depth, batch_size`` ≥ 1, ``particles`` ≥ 2,
        ``probes, paths`` ≥ 0, ``outputs`` ≥ 1), ``backward`` other than ``"coupled"`` or
        ``"decoupled"``, ``dtype`` other than float32 or float64, or an optimizer
        argument that ``simulate`` refuses.
    """
    N = check_int("n_train", n_train, 1)
    d = check_int("input_dim", input_dim, 1)
    L = check_int("depth", depth, 1)
    param = check_limit_parametrization(parametrization, "memory_estimate")
    block = param.block
    P = check_int("particles", particles, 2)
    B = check_int("batch_size", batch_size, 1)
    probes = check_int("probes", probes, 0)
    paths = check_int("paths", paths, 0)
    C = check_int("outputs", outputs, 1)
    check_choice("backward", backward, BACKWARD_LIMITS)
    check_choice("block", block, BLOCKS)
    check_parametrization(param.branch_exponent, param.trainable, block)
    _, dtype = resolve_device_dtype("cpu", dtype)
    opt = check_optimizer(eta_c=0.0 if eta_c is None else eta_c, K=max(N // B, 1),
                          gamma0=param.gamma0, **optimizer_keywords(optimizer))
    item = torch.tensor([], dtype=dtype).element_size()
    plain = isinstance(opt, SGDRun) and opt.plain
    width = max(B, probes, 1)
    rows = history_rows(N)  # the history's rows (a few zero rows beyond N)
    est = {
        "phi_history": L * rows * P * item,  # φ(h_ℓ) for ℓ < L
        "g_history": (L + 1) * rows * P * item,  # g_ℓ for ℓ ≤ L
        "hL_history": N * P * item,
        # both drivers' innovations, stored beside φ and g (one unused layer)
        "innovations": (2 * L + 1) * rows * P * item,
        "drivers": 2 * GrowingGaussianDriver.memory_bytes(
            L, P, N, item, storage=True, responses=backward == "coupled"),
        "particles": P * (d + 1) * item,
        # the current step's path and per-layer temporaries of the batch / probes
        "workspace": (L + 1 + 8) * width * P * item
        # coupled: Stein moments, their solve (float64) and the drift weights
        + (3 * N * width * 8 if backward == "coupled" else 0),
        "paths": 2 * paths * N * (L + 1) * item,
        "optimizer": 0 if plain else 2 * (N // B) * 8 + N * (8 + item),
    }
    if block == "two-layer":
        est.update(_two_layer_entries(N, L, P, item, backward, width, B))
    elif block == "post-nonlin-ms":
        est.update(_ms_block_entries(N, L, P, item, backward, width))
    if not isinstance(opt, SGDRun):
        est["adam_states"] = ((3 * L + 2) * P * P + 3 * P * (d + C)) * item
    if replaying():  # nfd._simulation._replay: the static passes' own buffers
        est["replay"] = ((2 * L + 1) * B * P + L * P) * item + (2 * B + 2 * width) * rows * 8
    if C >= 2:
        est["outputs"] = ((2 * C - 1) * P + width * C * P) * item + N * C * (8 + item)
    est["total"] = sum(est.values())
    return est


def _two_layer_entries(N: int, L: int, P: int, item: int, backward: str, width: int,
                       B: int) -> dict[str, int]:
    """The entries that differ for two-layer blocks (:class:`nfd._simulation._twolayer.
    TwoLayerHistory`: whole rows, no interleaving; four drivers with their own
    innovations)."""
    return {
        "phi_history": 3 * L * N * P * item,  # h_{ℓ−1}, φ(x_ℓ), a_ℓ
        "g_history": (L + 1) * N * P * item,
        "innovations": 0,  # the drivers' own, in "drivers"
        "drivers": 4 * GrowingGaussianDriver.memory_bytes(
            L, P, N, item, storage=False, responses=backward == "coupled"),
        # as one-layer blocks, plus the block's x_ℓ and the per-source temporaries
        "workspace": (2 * L + 1 + 12) * width * P * item
        + (3 * N * width * 8 if backward == "coupled" else 0),
    }


def _ms_block_entries(N: int, L: int, P: int, item: int, backward: str,
                      width: int) -> dict[str, int]:
    """The entries that differ for Tensor Programs VI's block (:class:`nfd._simulation.
    _msblock.MSModel`: whole rows h_{ℓ−1}, a_ℓ and g_ℓ, two drivers with their own
    innovations)."""
    return {
        "phi_history": 2 * L * N * P * item,  # h_{ℓ−1}, a_ℓ
        "g_history": (L + 1) * N * P * item,
        "innovations": 0,  # the drivers' own, in "drivers"
        "drivers": 2 * GrowingGaussianDriver.memory_bytes(
            L, P, N, item, storage=False, responses=backward == "coupled"),
        "workspace": (2 * L + 1 + 10) * width * P * item
        + (3 * N * width * 8 if backward == "coupled" else 0),
    }
