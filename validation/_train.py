"""Online SGD of finite depth-μP ResNet ensembles, recorded in the schema of
``nfd.simulate`` (plus a leading ``seed`` dimension).

Stream convention: X has K·B rows consumed in order, B per step; the forward pass
of step k uses the parameters after k updates (paper 002, §2 and appendix E).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
import xarray as xr
from tqdm.auto import tqdm

from nfd._activations import Activation
from nfd._checks import (
    check_choice,
    check_int,
    check_matrix,
    check_positive_float,
    check_targets,
    resolve_device_dtype,
)
from nfd._losses import Loss, get_loss
from nfd._results import base_attrs

from ._memory import _breakdown, check_memory as _check_memory
from ._models import (
    BACKWARDS,
    BLOCKS,
    FIRST_LAYER_LRS,
    REGIMES,
    SCALINGS,
    STYLES,
    ResNetEnsemble,
    resolve_seeds,
)

__all__ = ["train_resnet", "init_increments"]

_DEFAULT_PROBE_STEPS = 33  # as nfd.simulate


def _steps_arg(name: str, value, lo: int, hi: int) -> np.ndarray:
    """Sorted unique int steps in [lo, hi]."""
    if value is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = [value]
    try:
        arr = np.asarray(list(value))
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints") from None
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name} must contain ints, got dtype {arr.dtype}")
    arr = np.unique(arr.astype(np.int64))
    if arr.size and (arr[0] < lo or arr[-1] > hi):
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {arr.tolist()}")
    return arr


def _probes_arg(probes, d: int) -> tuple[np.ndarray, np.ndarray] | None:
    if probes is None:
        return None
    if not isinstance(probes, (tuple, list)) or len(probes) != 2:
        raise TypeError("probes must be a pair (X_probe, y_probe)")
    Xp = check_matrix("probes[0]", probes[0], columns=d)
    yp = check_targets("probes[1]", probes[1], Xp.shape[0])
    return Xp, yp


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float64).numpy()


def _min_eig(V: torch.Tensor, n: int) -> torch.Tensor:
    """Smallest eigenvalue of the Gram matrices V Vᵀ/n over the last two axes."""
    V = V.to(torch.float64)
    return torch.linalg.eigvalsh(V @ V.mT / n)[..., 0]


def _nonfinite_error(step: int, f, h2, g2, seeds: list[int]) -> FloatingPointError:
    h_bad = ~torch.isfinite(h2).cpu()  # (L+1, S)
    g_bad = ~torch.isfinite(g2).cpu()
    if bool(h_bad.any()):
        layer = int(h_bad.any(1).nonzero()[0, 0])
        bad_seeds = [seeds[i] for i in h_bad[layer].nonzero()[:, 0].tolist()]
        where = f"forward pass, layer {layer} (h_{layer})"
    elif bool(g_bad.any()):
        layer = int(g_bad.any(1).nonzero()[-1, 0])
        bad_seeds = [seeds[i] for i in g_bad[layer].nonzero()[:, 0].tolist()]
        where = f"backward pass, layer {layer} (g_{layer})"
    else:
        bad = (~torch.isfinite(f)).any(1).cpu()
        bad_seeds = [seeds[i] for i in bad.nonzero()[:, 0].tolist()]
        where = "the output f"
    return FloatingPointError(
        f"non-finite values at SGD step {step} in {where} for seeds {bad_seeds}; "
        "lower eta_c (or T), or use dtype='float64'"
    )


def train_resnet(
    X,
    y,
    *,
    width: int,
    depth: int,
    activation: str | Activation | Callable = "relu",
    loss: str | Loss | Callable = "mse",
    eta_c: float,
    T: float = 1.0,
    backward: str = "coupled",
    style: str = "pre",
    block: str = "one-layer",
    scaling: str = "depth-mup",
    regime: str = "feature",
    first_layer_lr: str = "depth-mup",
    seeds: int | Sequence[int] = 1,
    batch_size: int = 1,
    n_steps: int | None = None,
    probes: tuple | None = None,
    probe_steps: Sequence[int] | None = None,
    eig_steps: Sequence[int] | None = None,
    record_collapse: bool = True,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    progress: bool = False,
    check_memory: bool = True,
) -> xr.Dataset:
    """Train an ensemble of finite depth-μP ResNets by online SGD (paper 002, §2, §4).

    The network is eq. 1 (``style="pre"``), eq. 9 (``"post"``) or the two-layer
    block of eq. 6 (``block="two-layer"``); the μP ResNet (``scaling="mup"``) and
    μP MLP (``"mlp"``) are the Figure 4 baselines. Backprop is eq. 3 / 24, by hand,
    with the forward weights (``backward="coupled"``) or an independent copy W̃
    that receives the same updates (``"decoupled"``, Corollary 1) — the network
    whose n → ∞ limit at depth L is ``nfd.simulate(..., steps=L)``. Updates are
    those of appendix E; see :mod:`validation._models` for every formula.

    Regimes (footnote 2): ``"feature"``: α = 1/√n, η = η_c n (Theorem 1);
    ``"kernel"``: α = 1, η = η_c (so that one step moves f by O(η_c) in both).

    Parameters
    ----------
    X : array (K·B, d)
        Input stream, consumed B rows per step, in order.
    y : array (K·B,)
        Targets.
    width, depth : int
        n and L.
    activation, loss
        Names or callables (see ``nfd._activations``, ``nfd._losses``).
    eta_c : float
        η_c ≥ 0 (required: stability needs roughly η_c < 2/K(x, x) with K the
        per-sample tangent kernel, e.g. η_c ≲ 0.4 for relu, mse, T = 1).
    T : float
        Time horizon (branch scale √(T/L)).
    backward, style, block, scaling, regime, first_layer_lr : str
        See :class:`validation.ResNetEnsemble`.
    seeds : int or sequence of int
        S (meaning seeds 0..S−1) or the seeds themselves; trained at once.
    batch_size : int
        B samples per step; the gradient is the batch mean.
    n_steps : int, optional
        K; default ``len(X) // batch_size`` (then ``len(X)`` must be a multiple
        of ``batch_size``).
    probes : (X_probe (P, d), y_probe (P,)), optional
        Inputs evaluated forward-only with the parameters after each
        ``probe_step`` updates.
    probe_steps : sequence of int in [0, K], optional
        Default (as ``nfd.simulate``): 33 evenly spaced steps including 0 and K
        (every step when K ≤ 32).
    eig_steps : sequence of int in [0, K−1], optional
        Steps at which the smallest eigenvalues of the empirical Σ and Θ are
        recorded (Figure 6). Costs storing (max(eig_steps)+1)·B trajectories of
        every layer, so the default is none (``nfd.simulate`` defaults to 5).
    record_collapse : bool
        Two-layer blocks: record the collapse observables of eq. 27, 33–34
        (two extra matrix products per block and step).
    device, dtype
        Default: CUDA when available, float32.
    progress : bool
        Show a tqdm progress bar.
    check_memory : bool
        Raise ``MemoryError`` before allocating more than is available.

    Returns
    -------
    xarray.Dataset
        Dimensions ``seed, step, sample, time, probe, probe_step, eig_step,
        block_time``. Variables:

        * ``f``, ``loss``, ``dloss`` (seed, step, sample): output on the step-k
          batch with the parameters after k updates, ℒ(f, y) and χ = ℒ'(f, y);
          ``y`` (step, sample).
        * ``h2``, ``g2`` (seed, step, time): ‖h_ℓ‖²/n and ‖g_ℓ‖²/n at step k,
          averaged over the batch, ``time`` = t_ℓ = ℓT/L, ℓ = 0..L.
        * ``probe_f``, ``probe_loss`` (seed, probe_step, probe), ``probe_y``
          (probe) — empty dimensions without ``probes``.
        * ``sigma_min_eig``, ``theta_min_eig`` (seed, eig_step, time) — empty
          without ``eig_steps``: smallest eigenvalue of [⟨z_ℓ⁽ⁱ⁾, z_ℓ⁽ʲ⁾⟩/n] and
          [⟨g_ℓ⁽ⁱ⁾, g_ℓ⁽ʲ⁾⟩/n] over all training samples i, j of steps 0..eig_step,
          where z_ℓ is the input of the next weight matrix: φ(h_ℓ) (pre-activation
          one-layer blocks and MLP; the Σ of Definition 1), h_ℓ (post-activation
          and two-layer blocks). NaN at ℓ = L for Σ.
        * ``internal_update``, ``residual_update`` (seed, step, block_time) — two-
          layer blocks with ``record_collapse``: batch means of eq. 27 and
          eq. 33–34 (see :meth:`ResNetEnsemble.collapse_observables`),
          ``block_time`` = t_ℓ, ℓ = 1..L.

        ``attrs`` hold every parameter (netCDF-serializable, the keys of
        ``nfd.simulate`` where shared; ``model="network"``).

    Raises
    ------
    TypeError, ValueError
        Bad arguments (naming the argument).
    MemoryError
        When the estimate of :func:`validation.memory_estimate` does not fit.
    FloatingPointError
        Non-finite values, naming the step, layer and seeds.
    """
    Xn = check_matrix("X", X)
    total, d = Xn.shape
    yn = check_targets("y", y, total)
    width = check_int("width", width, 1)
    depth = check_int("depth", depth, 1)
    B = check_int("batch_size", batch_size, 1)
    if n_steps is None:
        if total % B:
            raise ValueError(
                f"len(X) = {total} is not a multiple of batch_size = {B}; pass n_steps"
            )
        K = total // B
    else:
        K = check_int("n_steps", n_steps, 1)
        if K * B > total:
            raise ValueError(
                f"n_steps·batch_size = {K * B} exceeds the {total} rows of X"
            )
    if K < 1:
        raise ValueError(f"X has {total} rows, fewer than batch_size = {B}")
    for name, val, choices in [
        ("backward", backward, BACKWARDS), ("style", style, STYLES),
        ("block", block, BLOCKS), ("scaling", scaling, SCALINGS),
        ("regime", regime, REGIMES), ("first_layer_lr", first_layer_lr, FIRST_LAYER_LRS),
    ]:
        check_choice(name, val, choices)
    T = check_positive_float("T", T)
    eta_c = check_positive_float("eta_c", eta_c, allow_zero=True)
    seed_list = resolve_seeds(seeds)
    S = len(seed_list)
    loss_fn = get_loss(loss)
    probe_data = _probes_arg(probes, d)
    if probe_data is None:
        if probe_steps is not None:
            raise ValueError("probe_steps was given without probes")
        psteps = np.zeros(0, dtype=np.int64)
    elif probe_steps is None:
        psteps = np.unique(np.linspace(0, K, min(_DEFAULT_PROBE_STEPS, K + 1)).round()
                           .astype(np.int64))
    else:
        psteps = _steps_arg("probe_steps", probe_steps, 0, K)
    esteps = _steps_arg("eig_steps", eig_steps, 0, K - 1)
    dev, dt = resolve_device_dtype(device, dtype)
    collapse = bool(record_collapse) and block == "two-layer"
    P = 0 if probe_data is None else probe_data[0].shape[0]
    M = int(esteps[-1] + 1) * B if esteps.size else 0
    if check_memory:
        parts = _breakdown(
            d, width, depth, seeds=S, batch_size=B, n_steps=K, backward=backward,
            block=block, style=style, record_collapse=collapse, n_probes=P,
            n_probe_steps=len(psteps), eig_history=M, n_eig_steps=len(esteps),
            itemsize=torch.empty((), dtype=dt).element_size(),
        )
        _check_memory(sum(parts.values()), dev, what="train_resnet", parts=parts)

    model = ResNetEnsemble(
        d, width=width, depth=depth, activation=activation, T=T, seeds=seed_list,
        backward=backward, style=style, block=block, scaling=scaling, regime=regime,
        eta_c=eta_c, first_layer_lr=first_layer_lr, record_collapse=collapse,
        device=dev, dtype=dt, check_memory=False,
    )
    n, L = width, depth
    kw = dict(device=dev, dtype=dt)
    Xd = torch.as_tensor(Xn[: K * B], **kw)
    yd = torch.as_tensor(yn[: K * B], **kw).reshape(K, B)
    rec_f = torch.empty((K, S, B), **kw)
    rec_loss = torch.empty((K, S, B), **kw)
    rec_dloss = torch.empty((K, S, B), **kw)
    rec_h2 = torch.empty((K, L + 1, S), **kw)
    rec_g2 = torch.empty((K, L + 1, S), **kw)
    if collapse:
        rec_int = torch.empty((K, L, S), **kw)
        rec_res = torch.empty((K, L, S), **kw)
    if probe_data is not None:
        Xp = torch.as_tensor(probe_data[0], **kw)
        yp = torch.as_tensor(probe_data[1], **kw)
        rec_pf = torch.empty((len(psteps), S, P), **kw)
        probe_index = {int(k): i for i, k in enumerate(psteps)}
    else:
        probe_index = {}
    if M:
        phi_first = style == "pre" and block == "one-layer"
        hist_z = torch.empty((L, S, M, n), **kw)
        hist_g = torch.empty((L + 1, S, M, n), **kw)
        rec_sig = torch.full((len(esteps), L + 1, S), float("nan"), device=dev,
                             dtype=torch.float64)
        rec_the = torch.empty((len(esteps), L + 1, S), device=dev, dtype=torch.float64)
        eig_index = {int(k): i for i, k in enumerate(esteps)}
        last_eig = int(esteps[-1])

    def probe(k: int) -> None:
        if k in probe_index:
            pf = model._forward(Xp, store=False)
            if not bool(torch.isfinite(pf).all()):
                bad = [seed_list[i] for i in (~torch.isfinite(pf)).any(1).nonzero()[:, 0].tolist()]
                raise FloatingPointError(
                    f"non-finite probe outputs after SGD step {k} (parameters after {k} "
                    f"updates) for seeds {bad}; lower eta_c (or T)"
                )
            rec_pf[probe_index[k]] = pf

    with torch.no_grad():
        for k in tqdm(range(K), disable=not progress, desc="train_resnet"):
            probe(k)
            xb, yb = Xd[k * B:(k + 1) * B], yd[k]
            f = model._forward(xb, store=True)
            ybe = yb.expand_as(f)
            rec_f[k] = f
            rec_loss[k] = loss_fn(f, ybe)
            if collapse:
                rec_int[k] = model._internal
                rec_res[k] = model._residual
            chi = loss_fn.grad(f, ybe)
            rec_dloss[k] = chi
            model._backward(chi, mode="update")
            H, G = model._H, model._G
            h2 = torch.linalg.vector_norm(H, dim=-1).square_().mean(-1).div_(n)
            g2 = torch.linalg.vector_norm(G, dim=-1).square_().mean(-1).div_(n)
            rec_h2[k] = h2
            rec_g2[k] = g2
            # one host sync per step (not per layer)
            if not bool(torch.isfinite(f).all() & torch.isfinite(h2).all()
                        & torch.isfinite(g2).all()):
                raise _nonfinite_error(k, f, h2, g2, seed_list)
            if M and k <= last_eig:
                sl = slice(k * B, (k + 1) * B)
                hist_z[:, :, sl] = model.act.phi(H[:L]) if phi_first else H[:L]
                hist_g[:, :, sl] = G
                if k in eig_index:
                    m = (k + 1) * B
                    rec_sig[eig_index[k], :L] = _min_eig(hist_z[:, :, :m], n)
                    rec_the[eig_index[k]] = _min_eig(hist_g[:, :, :m], n)
        probe(K)

    times = np.arange(L + 1) * (T / L)
    coords = {
        "seed": np.asarray(seed_list, dtype=np.int64),
        "step": np.arange(K),
        "sample": np.arange(B),
        "time": times,
        "probe": np.arange(P),
        "probe_step": psteps,
        "eig_step": esteps,
    }
    ssb = ("seed", "step", "sample")
    data_vars = {
        "f": (ssb, _np(rec_f).transpose(1, 0, 2)),
        "y": (("step", "sample"), yn[: K * B].reshape(K, B)),
        "loss": (ssb, _np(rec_loss).transpose(1, 0, 2)),
        "dloss": (ssb, _np(rec_dloss).transpose(1, 0, 2)),
        "h2": (("seed", "step", "time"), _np(rec_h2).transpose(2, 0, 1)),
        "g2": (("seed", "step", "time"), _np(rec_g2).transpose(2, 0, 1)),
    }
    if probe_data is not None:
        pf = _np(rec_pf).transpose(1, 0, 2)
        pl = _np(loss_fn(rec_pf, yp.expand_as(rec_pf))).transpose(1, 0, 2)
        py = probe_data[1]
    else:
        pf = pl = np.zeros((S, 0, 0))
        py = np.zeros(0)
    data_vars["probe_f"] = (("seed", "probe_step", "probe"), pf)
    data_vars["probe_loss"] = (("seed", "probe_step", "probe"), pl)
    data_vars["probe_y"] = (("probe",), py)
    if M:
        sig, the = _np(rec_sig).transpose(2, 0, 1), _np(rec_the).transpose(2, 0, 1)
    else:
        sig = the = np.zeros((S, 0, L + 1))
    data_vars["sigma_min_eig"] = (("seed", "eig_step", "time"), sig)
    data_vars["theta_min_eig"] = (("seed", "eig_step", "time"), the)
    if collapse:
        coords["block_time"] = times[1:]
        data_vars["internal_update"] = (("seed", "step", "block_time"),
                                        _np(rec_int).transpose(2, 0, 1))
        data_vars["residual_update"] = (("seed", "step", "block_time"),
                                        _np(rec_res).transpose(2, 0, 1))
    ds = xr.Dataset(data_vars, coords=coords, attrs=_attrs(model, loss_fn, B, K))
    _describe(ds)
    return ds


def _attrs(model: ResNetEnsemble, loss_fn: Loss, B: int, K: int) -> dict:
    # same keys as nfd.simulate where they mean the same thing (nfd._results.base_attrs)
    feature = model.regime == "feature"
    return base_attrs(
        model="network", source="validation.train_resnet", backward=model.backward,
        activation=model.act.name, loss=loss_fn.name, eta_c=model.eta_c, T=model.T,
        steps=model.L, depth=model.L, width=model.n, batch_size=B, sgd_steps=K,
        input_dim=model.d, seeds=[int(s) for s in model.seeds],
        device=str(model.device), dtype=str(model.dtype).split(".")[-1],
        alpha="1/sqrt(n)" if feature else "1", alpha_value=model.alpha,
        learning_rate="eta_c*n" if feature else "eta_c", learning_rate_value=model.eta,
        learning_rate_first_layer_value=model.eta * model.lr_mult_first,
        style=model.style, block=model.block, scaling=model.scaling,
        regime=model.regime, first_layer_lr=model.first_layer_lr,
    )


_DESCRIPTIONS = {
    "f": "network output on the step-k batch, parameters after k updates",
    "loss": "loss of f against y",
    "dloss": "chi = dL/df(f, y), the factor of every SGD update",
    "y": "training targets",
    "h2": "|h_l|^2/n averaged over the batch, time t_l = l T/L",
    "g2": "|g_l|^2/n, g_l = (sqrt(n)/alpha) df/dh_l, averaged over the batch",
    "probe_f": "probe outputs with the parameters after probe_step updates",
    "probe_loss": "probe losses",
    "probe_y": "probe targets",
    "sigma_min_eig": "smallest eigenvalue of <z_l^i, z_l^j>/n over the training samples "
                     "of steps 0..eig_step (z = phi(h) pre-activation one-layer/MLP, "
                     "z = h otherwise); NaN at l = L",
    "theta_min_eig": "smallest eigenvalue of <g_l^i, g_l^j>/n over the training samples "
                     "of steps 0..eig_step",
    "internal_update": "eq. 27: |x_l - W1(0) h_(l-1)/sqrt(n)| / sqrt(n), batch mean",
    "residual_update": "eq. 33-34: |(W2 - W2(0)) phi(x_l)| / (sqrt(tau n) sqrt(n)), "
                       "batch mean",
}


def _describe(ds: xr.Dataset) -> None:
    for name, text in _DESCRIPTIONS.items():
        if name in ds:
            ds[name].attrs["description"] = text


def init_increments(
    x,
    *,
    width: int,
    depth: int,
    activation: str | Activation | Callable = "relu",
    T: float = 1.0,
    seeds: int | Sequence[int] = 1,
    backward: str = "coupled",
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
) -> xr.Dataset:
    """Per-layer features, gradients and normalized noise increments at initialization.

    For the pre-activation network of eq. 1 (depth-μP, same seeds and so the same
    weights as :func:`train_resnet`) on one input x, returns the normalized
    increments

        ξ_ℓ = W_ℓ φ(h_{ℓ−1}) / ‖φ(h_{ℓ−1})‖,     ξ̃_ℓ = W̃_ℓᵀ g_ℓ / ‖g_ℓ‖,

    (W̃ = W when coupled), so that exactly

        h_ℓ = h_{ℓ−1} + √τ σ_ℓ ξ_ℓ,      g_{ℓ−1} = g_ℓ + √τ σ̃_ℓ φ'(h_{ℓ−1}) ⊙ ξ̃_ℓ,

    τ = T/L, σ_ℓ = ‖φ(h_{ℓ−1})‖/√n, σ̃_ℓ = ‖g_ℓ‖/√n: the Euler–Maruyama steps of
    the forward SDE (Prop. 2/3) and backward SDE (Prop. 6) driven by the network's
    own noise √τ ξ_ℓ — the synchronous coupling of appendix C. Each coordinate of
    ξ_ℓ is N(0, 1) given the past (W_ℓ is fresh); so is ξ̃_ℓ with
    ``backward="decoupled"`` (W̃_ℓ is independent of everything g_ℓ depends on).
    With ``"coupled"`` ξ̃_ℓ is correlated with the forward pass through W_ℓ (the
    GIA holds only as n → ∞).

    Parameters
    ----------
    x : array (d,) or (1, d)
        One input.
    width, depth, activation, T, seeds, backward, device, dtype
        As in :func:`train_resnet`.

    Returns
    -------
    xarray.Dataset
        ``h``, ``g`` (seed, time, width) for ℓ = 0..L; ``xi``, ``xi_tilde``
        (seed, layer, width) and ``sigma``, ``sigma_tilde`` (seed, layer) for
        ℓ = 1..L; ``f`` (seed).
    """
    xn = check_matrix("x", x)
    if xn.shape[0] != 1:
        raise ValueError(f"x must be a single input of shape (d,) or (1, d), got {xn.shape}")
    model = ResNetEnsemble(
        xn.shape[1], width=width, depth=depth, activation=activation, T=T, seeds=seeds,
        backward=backward, device=device, dtype=dtype,
    )
    n, L = model.n, model.L
    with torch.no_grad():
        out = model.propagate(xn)
        H, G = out["h"][:, :, 0], out["g"][:, :, 0]  # (S, L+1, n)
        Z = model.act.phi(H[:, :L])  # (S, L, n)
        Wf = model.W  # (S, L, n, n)
        Wb = model.backward_weights("W")
        zn = torch.linalg.vector_norm(Z, dim=-1, keepdim=True)
        gn = torch.linalg.vector_norm(G[:, 1:], dim=-1, keepdim=True)
        xi = (Wf @ Z.unsqueeze(-1)).squeeze(-1) / zn
        xit = (Wb.mT @ G[:, 1:].unsqueeze(-1)).squeeze(-1) / gn
    times = np.arange(L + 1) * (model.T / L)
    ds = xr.Dataset(
        {
            "h": (("seed", "time", "width"), _np(H)),
            "g": (("seed", "time", "width"), _np(G)),
            "xi": (("seed", "layer", "width"), _np(xi)),
            "xi_tilde": (("seed", "layer", "width"), _np(xit)),
            "sigma": (("seed", "layer"), _np(zn[..., 0]) / math.sqrt(n)),
            "sigma_tilde": (("seed", "layer"), _np(gn[..., 0]) / math.sqrt(n)),
            "f": (("seed",), _np(out["f"][:, 0])),
        },
        coords={"seed": np.asarray(model.seeds, dtype=np.int64), "time": times,
                "layer": np.arange(1, L + 1), "width": np.arange(n)},
        attrs={"source": "validation.init_increments", "width": n, "depth": L,
               "T": model.T, "activation": model.act.name, "backward": model.backward,
               "seeds": [int(s) for s in model.seeds], "tau": model.T / L},
    )
    return ds
