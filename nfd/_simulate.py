"""``nfd.simulate``: the Neural Feature Dynamics of Definition 1 over a particle ensemble.

Discretisation (τ = T/L, trajectories i = 0, 1, … in SGD order, B per step,
χ_i = ℒ′(f̊^{(i)}, y^{(i)})/B, history = trajectories of earlier steps):

    h_0^{(k)} = u·x^{(k)}/√d − η_c Σ_i χ_i (x^{(i)}·x^{(k)}/d) g_0^{(i)}
    h_ℓ^{(k)} = h_{ℓ−1}^{(k)} − τ η_c Σ_i χ_i Σ_{ℓ−1}[i,k] g_ℓ^{(i)} + √τ z_ℓ^{(k)}
    g_L^{(k)} = v − η_c Σ_i χ_i h_L^{(i)},        f̊^{(k)} = E[g_L^{(k)} h_L^{(k)}]
    g_{ℓ−1}^{(k)} = g_ℓ^{(k)} − τ η_c Σ_i χ_i Θ_ℓ[i,k] φ(h_{ℓ−1}^{(i)}) φ′(h_{ℓ−1}^{(k)})
                    + √τ φ′(h_{ℓ−1}^{(k)}) z̃_ℓ^{(k)}

with Σ_{ℓ−1}[i,j] = E[φ(h_{ℓ−1}^{(i)})φ(h_{ℓ−1}^{(j)})], Θ_ℓ[i,j] = E[g_ℓ^{(i)}g_ℓ^{(j)}],
and z, z̃ independent growing Gaussian drivers (:class:`sde.GrowingGaussianDriver`).
The drift of h_ℓ multiplies g_ℓ (appendix E of paper 002; the g_{ℓ−1} of its eq. 4
is a typo). With L steps this is exactly the n → ∞ limit of a depth-L network whose
backward pass uses an independent weight copy receiving the same updates
(``backward="decoupled"``); as L → ∞ it is Definition 1.

Ordinary backprop (``backward="coupled"``) uses W_ℓ forward and W_ℓᵀ backward, so
the sources z_ℓ = W_ℓφ/√n and z̃_ℓ = W_ℓᵀg/√n respond to each other. Its n → ∞ limit
(Bordelon, Noci, Li, Hanin & Pehlevan, "Depthwise hyperparameter transfer in
residual networks: dynamics and scaling limit", ICLR 2024, paper 000 eq. 38, here
for SGD steps) adds two response drifts:

    h_ℓ^{(k)}     += √τ Σ_{s<k} A_ℓ(k,s) g_ℓ^{(s)},      A_ℓ(k,s) = E[∂φ(h_{ℓ−1}^{(k)})/∂z̃_ℓ^{(s)}]
    g_{ℓ−1}^{(k)} += √τ φ′(h_{ℓ−1}^{(k)}) Σ_{s≤k} B_ℓ(k,s) φ(h_{ℓ−1}^{(s)}),
                                                          B_ℓ(k,s) = E[∂g_ℓ^{(k)}/∂z_ℓ^{(s)}]

Both are estimated from the particles by Stein's lemma: a driver stores its
innovations ξ with z = 𝓛ξ, so E[∂F/∂z] = 𝓛^{−T} E[F ξ]
(:meth:`sde.GrowingGaussianDriver.stein_derivative`). For P particles this is the
conditional mean of a width-P network's W φ given both W Φ_{<k} and Wᵀ G_{<k}: the
term Gᵀ𝓛̃^{−T}(Ξ̃φ/P). It costs two more k×P streams per layer-step and no memory.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
import xarray as xr
from tqdm.auto import tqdm

from sde import GrowingGaussianDriver
from sde._drivers import default_jitter

from ._activations import Activation, get_activation
from ._checks import (
    check_choice,
    check_int,
    check_matrix,
    check_positive_float,
    check_targets,
    resolve_device_dtype,
)
from ._losses import Loss, get_loss
from ._memory import ensure_fits, memory_estimate
from ._results import base_attrs

__all__ = ["simulate", "BACKWARD_LIMITS"]

#: Backward-pass limits ``simulate`` can integrate. ``"coupled"``: ordinary
#: backpropagation (the backward pass uses the forward weights), whose limit keeps
#: the response functions of Bordelon, Noci, Li, Hanin & Pehlevan, "Depthwise
#: hyperparameter transfer in residual networks: dynamics and scaling limit",
#: ICLR 2024 (paper 000, App. D–E). ``"decoupled"``: the backward pass uses an
#: independent weight copy (gradient independence), Definition 1 of paper 002.
BACKWARD_LIMITS = ("coupled", "decoupled")


def _default_steps(K: int, count: int, include_end: bool) -> list[int]:
    last = K if include_end else K - 1
    if last < 0:
        return []
    return sorted(set(np.linspace(0, last, min(count, last + 1)).round().astype(int).tolist()))


def _check_steps(name: str, value, last: int) -> list[int]:
    out = sorted(set(int(s) for s in value))
    if out and (out[0] < 0 or out[-1] > last):
        raise ValueError(f"{name} must lie in 0..{last}, got {out}")
    return out


class _History:
    """Per-trajectory buffers of the ensemble, laid out (layer, trajectory, particle).

    Zero-filled at allocation: touching all pages at once costs about half of
    faulting them in one (B, P) row at a time inside the layer loop (measured on
    CPU: 0.20 vs 0.34 s per GB).
    """

    def __init__(self, L: int, N: int, P: int, device, dtype) -> None:
        self.phi = torch.zeros(L, N, P, device=device, dtype=dtype)  # φ(h_ℓ), ℓ < L
        self.g = torch.zeros(L + 1, N, P, device=device, dtype=dtype)  # g_ℓ, ℓ ≤ L
        self.hL = torch.zeros(N, P, device=device, dtype=dtype)
        self.coef = torch.zeros(N, device=device, dtype=dtype)  # η_c χ_i
        self.X = torch.empty(N, 0, device=device, dtype=dtype)
        self.n = 0  # committed trajectories


def _gram(rows: torch.Tensor, n: int, new: torch.Tensor, stored: bool) -> torch.Tensor:
    """Inner products of ``new`` (B, P) with ``rows[:n]`` and with itself, (n+B, B).

    ``stored``: ``new`` is already ``rows[n:n+B]``, so one product reads the history.
    """
    if stored:
        return rows[:n + new.shape[0]] @ new.T
    return torch.cat((rows[:n] @ new.T, new @ new.T))


def _draw(driver: GrowingGaussianDriver, t: int, gram: torch.Tensor, n: int, layer: int,
          direction: str, **kwargs) -> torch.Tensor:
    """``driver.append`` of the column ``gram`` (n+B, B) into ``out``; returns the pivot.

    A block covariance holding NaN/inf makes its eigen-solver fail on the CPU; that
    is reported as the ``FloatingPointError`` of a diverging run (B = 1 needs no
    solver: its NaN reaches the per-step check).
    """
    try:
        return driver.append(t, gram[:n], gram[n:], **kwargs)[1]
    except torch.linalg.LinAlgError as err:
        raise FloatingPointError(
            f"layer {layer} ({direction} pass): the driver covariance could not be "
            "factored (non-finite values)"
        ) from err


class _Model:
    """One ensemble of particles and its training history."""

    def __init__(self, act: Activation, L: int, T: float, eta_c: float, u, v, hist,
                 fwd: GrowingGaussianDriver, bwd: GrowingGaussianDriver,
                 coupled: bool) -> None:
        self.act, self.L, self.tau, self.eta_c = act, L, T / L, eta_c
        self.sqrt_tau = math.sqrt(self.tau)
        self.u, self.v, self.hist, self.fwd, self.bwd = u, v, hist, fwd, bwd
        self.coupled = coupled
        self.P = u.shape[0]
        self.d = u.shape[1]

    def _forward_weights(self, l: int, sigma: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        """Coupled only: coefficients (B, n) of the history rows g_ℓ^{(s)} in h_ℓ.

        −τ η_c χ_s Σ_{ℓ−1}[s, k] (as decoupled), plus (ordinary backprop, paper 000
        eq. 38 with SGD steps) √τ A_ℓ(k, s), A_ℓ(k, s) = E[∂φ(h_{ℓ−1}^{(k)}) /
        ∂z̃_ℓ^{(s)}], the response of this input's activation to the backward source
        of layer ℓ at earlier steps, estimated by Stein's lemma from the backward
        driver's innovations (:meth:`sde.GrowingGaussianDriver.stein_derivative`).
        """
        resp = self.bwd.stein_derivative(l - 1, phi)  # (n, B)
        weights = self.sqrt_tau * resp.T.to(phi.dtype)
        weights -= self.tau * sigma.T * self.hist.coef[:sigma.shape[0]]
        return weights

    def _backward_weights(self, l: int, theta: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Coupled only: coefficients (B, n+B) of the rows φ(h_{ℓ−1}^{(s)}), s ≤ k, in
        the increment of g_{ℓ−1} before its factor φ′(h_{ℓ−1}^{(k)}).

        −τ η_c χ_s Θ_ℓ[s, k] over the history (as decoupled), plus √τ B_ℓ(k, s),
        B_ℓ(k, s) = E[∂g_ℓ^{(k)} / ∂z_ℓ^{(s)}] (paper 000 eq. 38), estimated by Stein's
        lemma from the forward driver of layer ℓ. s runs over every committed
        trajectory, the current block included: g_ℓ^{(k)} depends on this step's
        forward source through φ′ of the layers above (the other samples of a
        mini-batch have expectation 0 and enter as in a finite network).
        """
        n = theta.shape[0]
        resp = self.fwd.stein_derivative(l - 1, g)  # (n+B, B)
        weights = self.sqrt_tau * resp.T.to(g.dtype)
        if n:
            weights[:, :n] -= self.tau * theta.T * self.hist.coef[:n]
        return weights

    def readout(self) -> torch.Tensor:
        """g_L = v − η_c Σ_i χ_i h_L^{(i)} (the readout after the recorded updates)."""
        n = self.hist.n
        if n == 0:
            return self.v
        return self.v - self.hist.coef[:n] @ self.hist.hL[:n]

    def forward(self, x: torch.Tensor, *, commit: bool, out: torch.Tensor | None = None,
                piv: torch.Tensor | None = None) -> torch.Tensor:
        """Forward pass of a block of inputs x (B, d) → h path (L+1, B, P).

        With ``commit`` the block's noise is appended to the driver, its activations
        to the history and the new pivots written to ``piv`` (training); otherwise
        the noise is conditioned on the history only (probes). ``out`` is an
        optional (L+1, B, P) buffer for the path: apart from φ(h) the loop then
        allocates nothing of size P, so a long run streams the history instead of
        faulting in fresh pages every layer.
        """
        hist, n, P, tau = self.hist, self.hist.n, self.P, self.tau
        B = x.shape[0]
        h = out if out is not None else torch.empty(self.L + 1, B, P, device=x.device,
                                                    dtype=x.dtype)
        torch.mm(x, self.u.T, out=h[0]).div_(math.sqrt(self.d))
        if n:
            a = hist.coef[:n] * (x @ hist.X[:n].T / self.d)  # (B, n)
            h[0].addmm_(a, hist.g[0, :n], alpha=-1.0)
        pivots = []
        for l in range(1, self.L + 1):
            if commit:
                phi = self.act.phi_into(h[l - 1], hist.phi[l - 1, n:n + B])
            else:
                phi = self.act.phi(h[l - 1])
            gram = _gram(hist.phi[l - 1], n, phi, commit) / P  # Σ_{ℓ−1}[:, new], (n+B, B)
            pivot = _draw(self.fwd, l - 1, gram, n, l - 1, "forward", commit=commit,
                          out=h[l])
            pivots.append(pivot)
            h[l].mul_(self.sqrt_tau).add_(h[l - 1])
            if n and self.coupled:
                h[l].addmm_(self._forward_weights(l, gram[:n], phi), hist.g[l, :n])
            elif n:
                h[l].addmm_(gram[:n].T * hist.coef[:n], hist.g[l, :n], alpha=-tau)
        if commit:
            piv[:-1] = torch.stack(pivots)
        return h

    def backward(self, h: torch.Tensor, gL: torch.Tensor, piv: torch.Tensor,
                 work: torch.Tensor) -> None:
        """Backward pass of the committed block with forward path h (L+1, B, P).

        The gradients are written straight into the history ``hist.g[:, n:n+B]``;
        ``work`` is a (2, B, P) buffer for the increments and φ′.
        """
        hist, n, P, tau = self.hist, self.hist.n, self.P, self.tau
        B = h.shape[1]
        hist.g[self.L, n:n + B] = gL
        incr, dphi = work
        pivots = []
        for l in range(self.L, 0, -1):
            g = hist.g[l, n:n + B]
            gram = _gram(hist.g[l], n, g, True) / P  # Θ_ℓ[:, new], (n+B, B)
            pivot = _draw(self.bwd, l - 1, gram, n, l, "backward", out=incr)
            pivots.append(pivot)
            incr.mul_(self.sqrt_tau)
            if self.coupled:
                incr.addmm_(self._backward_weights(l, gram[:n], g), hist.phi[l - 1, :n + B])
            elif n:
                incr.addmm_(gram[:n].T * hist.coef[:n], hist.phi[l - 1, :n], alpha=-tau)
            self.act.dphi_into(h[l - 1], dphi)
            torch.addcmul(g, dphi, incr, out=hist.g[l - 1, n:n + B])
        piv[1:] = torch.stack(pivots[::-1])

    def min_eigenvalues(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Smallest eigenvalues of Σ_ℓ and Θ_ℓ at every t_ℓ, ℓ = 0..L (Assumption 1)."""
        hist, n, P = self.hist, self.hist.n, self.P
        phiL = self.act.phi(hist.hL[:n])
        sig_L = torch.linalg.eigvalsh((phiL @ phiL.T / P).double())[0]
        th_0 = torch.linalg.eigvalsh((hist.g[0, :n] @ hist.g[0, :n].T / P).double())[0]
        sig = torch.cat([self.fwd.min_eigenvalues(), sig_L[None]])
        th = torch.cat([th_0[None], self.bwd.min_eigenvalues()])
        return sig, th


def simulate(
    X,
    y,
    *,
    eta_c: float,
    activation: str | Activation | Callable = "relu",
    loss: str | Loss | Callable = "mse",
    T: float = 1.0,
    steps: int = 64,
    particles: int = 4096,
    batch_size: int = 1,
    probes: tuple | None = None,
    probe_steps: Sequence[int] | None = None,
    eig_steps: Sequence[int] | None = None,
    paths: int = 0,
    backward: str = "coupled",
    seed: int = 0,
    device=None,
    dtype=None,
    progress: bool = True,
    rel_jitter: float | None = None,
    innovations: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> xr.Dataset:
    """Integrate the infinite-width training dynamics of a depth-L ResNet under online SGD.

    Particles carry their row ``u ~ N(0, I_d)`` of U and readout ``v ~ N(0, 1)``; the
    L-step Euler–Maruyama system (module docstring) is the n → ∞ limit of a depth-L
    ResNet (eq. 1 of paper 002) trained in the feature-learning regime (α = 1/√n,
    learning rate η_c·n on every parameter), either by ordinary backprop
    (``backward="coupled"``, the response-function limit of paper 000) or with an
    independent backward weight copy (``backward="decoupled"``, whose ``steps → ∞``
    limit is the Neural Feature Dynamics of paper 002, Definition 1 / Theorem 1).

    Parameters
    ----------
    X : array_like, shape (K·B, d)
        Training stream, consumed in order, B rows per SGD step.
    y : array_like, shape (K·B,)
        Targets (±1 labels for ``loss="logistic"``).
    eta_c : float
        Effective learning rate η_c ≥ 0 (η = η_c·n in the finite network).
    activation : str or callable
        φ; see :func:`nfd.get_activation`.
    loss : {"mse", "logistic"} or callable
        ``"mse"``: ½(f − y)²; ``"logistic"``: log(1 + e^{−yf}); or a callable
        returning ∂ℒ/∂f(f, y) (the recorded loss is then NaN).
    T : float
        Time horizon.
    steps : int
        L, the number of Euler–Maruyama steps = the depth of the matching network.
    particles : int
        P ≥ 2.
    batch_size : int
        B; each SGD step averages the gradient over B samples, each with its own
        trajectory in the history.
    probes : (array_like (Q, d), array_like (Q,)), optional
        Held-out inputs and targets evaluated forward-only at ``probe_steps`` with
        the parameters of that step; their noise is conditioned on the training
        history, not appended to it.
    probe_steps : sequence of int, optional
        In 0..K (K = after the last update); default ≤ 33 evenly spaced, with 0, K.
    eig_steps : sequence of int, optional
        Steps (0..K−1) after which to record the smallest eigenvalues of Σ_ℓ and
        Θ_ℓ (Assumption 1); default ≤ 5 evenly spaced steps.
    paths : int
        Number of particles whose h and g paths are kept.
    backward : {"coupled", "decoupled"}
        Which network's limit to integrate. ``"coupled"`` (default): ordinary
        backpropagation, the network people train; its limit keeps the forward and
        backward response functions A_ℓ, B_ℓ of Bordelon, Noci, Li, Hanin &
        Pehlevan, "Depthwise hyperparameter transfer in residual networks: dynamics
        and scaling limit", ICLR 2024 (paper 000, eq. 38, App. E), estimated from
        the particles by Stein's lemma (see :class:`_Model`). ``"decoupled"``: the
        backward pass uses an independent weight copy receiving the same updates
        (gradient independence); its limit is Definition 1 of paper 002. The two
        differ by O(1) at every depth (docs/validation/REPORT.md). The coupled
        estimate's finite-P error grows with the number k of trajectories relative
        to P: keep P ≫ K·B (measured on digits 3 vs 8, K = 200, L = 8: P = 16384
        agrees with P = 65536 within Monte Carlo error, P = 4096 drifts by an rms
        of 0.08 in f over the last 50 steps).
    seed : int
        Seed of the run's generator; bit-for-bit reproducible on one device.
    device, dtype :
        Default CUDA if available, float32.
    progress : bool
        Show a tqdm progress bar over SGD steps.
    rel_jitter : float, optional
        Relative eigenvalue floor of the growing drivers (singular covariances from
        repeated inputs or dead units are regularised and a warning is issued);
        default 1e-5 in float32, 1e-10 in float64.
    innovations : (Tensor, Tensor), optional
        Standard normal innovations of the forward and backward drivers, each of
        shape (steps, K·B, particles) in ``dtype``, used instead of drawing them
        (probe noise is still drawn from ``seed``). For runs that share their
        Brownian paths across depths: see :func:`nfd.coarsen_innovations`.

    Returns
    -------
    xarray.Dataset
        Dimensions ``step`` (K), ``sample`` (B), ``time`` (t_ℓ = ℓT/L, ℓ = 0..L),
        ``probe``, ``probe_step``, ``eig_step``, ``particle``. Variables:
        ``f``, ``f_se`` (Monte Carlo standard error), ``y``, ``loss``, ``dloss``
        (step, sample); ``h2`` = E[h²] and ``g2`` = E[g²] (step, time), averaged
        over the batch; ``sigma_pivot`` / ``theta_pivot`` (step, time): the smallest
        eigenvalue of the new Cholesky block of each driver (NaN where no driver
        acts: Σ at t_L, Θ at t_0); ``sigma_min_eig`` / ``theta_min_eig``
        (eig_step, time); ``probe_f``, ``probe_f_se``, ``probe_loss``
        (probe_step, probe) and ``probe_y``; ``h_path`` / ``g_path`` (particle,
        step, sample, time) when ``paths``. Every parameter is in ``attrs``.

    Raises
    ------
    ValueError, TypeError
        Bad arguments (the message names the argument).
    MemoryError
        Before allocating, if the run does not fit (see :func:`nfd.memory_estimate`).
    FloatingPointError
        When a particle becomes NaN/inf; names the SGD step and layer.
    """
    (Xn, yn, eta_c, T, L, B, lossf, Xp, yp, probe_steps) = check_stream(
        X, y, eta_c=eta_c, T=T, steps=steps, batch_size=batch_size, backward=backward,
        loss=loss, probes=probes, probe_steps=probe_steps)
    N, d = Xn.shape
    K = N // B
    P = check_int("particles", particles, 2)
    paths = check_int("paths", paths, 0)
    seed = check_int("seed", seed, 0)
    if rel_jitter is not None:
        rel_jitter = check_positive_float("rel_jitter", rel_jitter)
    if paths > P:
        raise ValueError(f"paths={paths} exceeds particles={P}")
    act = get_activation(activation)
    eig_steps = (_default_steps(K, 5, False) if eig_steps is None
                 else _check_steps("eig_steps", eig_steps, K - 1))
    device, dtype = resolve_device_dtype(device, dtype)
    rel_jitter = default_jitter(dtype) if rel_jitter is None else rel_jitter
    Q = 0 if Xp is None else Xp.shape[0]
    est = memory_estimate(n_train=N, input_dim=d, steps=L, particles=P, batch_size=B,
                          probes=Q, paths=paths, dtype=dtype, backward=backward)
    ensure_fits(est["total"], device, parts={k: v for k, v in est.items() if k != "total"},
                advice="lower particles, steps (depth) or the number of SGD steps")

    gen = torch.Generator(device=device).manual_seed(seed)
    u = torch.randn(P, d, generator=gen, device=device, dtype=dtype)
    v = torch.randn(P, generator=gen, device=device, dtype=dtype)
    hist = _History(L, N, P, device, dtype)
    hist.X = torch.as_tensor(Xn, device=device, dtype=dtype)
    given = _check_innovations(innovations, (L, N, P), device, dtype)
    drivers = [GrowingGaussianDriver(L, P, N, device=device, dtype=dtype, generator=gen,
                                     rel_jitter=rel_jitter, innovations=xi) for xi in given]
    model = _Model(act, L, T, eta_c, u, v, hist, *drivers, coupled=backward == "coupled")
    yt = torch.as_tensor(yn, device=device, dtype=dtype).reshape(K, B)

    nan = float("nan")
    rec = {name: torch.full(shape, nan, device=device, dtype=torch.float64)
           for name, shape in {
               "f": (K, B), "f_se": (K, B), "loss": (K, B), "dloss": (K, B),
               "h2": (K, L + 1), "g2": (K, L + 1), "sigma_pivot": (K, L + 1),
               "theta_pivot": (K, L + 1), "sigma_min_eig": (len(eig_steps), L + 1),
               "theta_min_eig": (len(eig_steps), L + 1),
               "probe_f": (len(probe_steps), Q), "probe_f_se": (len(probe_steps), Q),
               "probe_loss": (len(probe_steps), Q)}.items()}
    if paths:
        rec["h_path"] = torch.empty(K, L + 1, B, paths, device=device, dtype=dtype)
        rec["g_path"] = torch.empty(K, L + 1, B, paths, device=device, dtype=dtype)
    xp = None if Xp is None else torch.as_tensor(Xp, device=device, dtype=dtype)
    ypt = None if yp is None else torch.as_tensor(yp, device=device, dtype=dtype)
    probe_index = {s: i for i, s in enumerate(probe_steps)}
    eig_index = {s: i for i, s in enumerate(eig_steps)}

    def evaluate_probes(j: int) -> None:
        try:
            hp = model.forward(xp, commit=False)
        except FloatingPointError as err:
            raise FloatingPointError(
                f"non-finite values in the probe evaluation at step {probe_steps[j]}, "
                f"{err}; lower eta_c or T") from err
        prod = model.readout() * hp[-1]
        fp = prod.mean(1)
        rec["probe_f"][j] = fp
        rec["probe_f_se"][j] = prod.std(1) / math.sqrt(P)
        rec["probe_loss"][j] = lossf(fp, ypt)
        _check_probes(fp, hp, probe_steps[j])

    x_all = hist.X.reshape(K, B, d)
    h_buf = torch.empty(L + 1, B, P, device=device, dtype=dtype)
    work = torch.empty(2, B, P, device=device, dtype=dtype)
    bar = tqdm(range(K + 1), disable=not progress, desc="nfd.simulate", unit="step")
    for k in bar:
        if k in probe_index:
            evaluate_probes(probe_index[k])
        if k == K:
            break
        n = hist.n
        try:
            h = model.forward(x_all[k], commit=True, out=h_buf, piv=rec["sigma_pivot"][k])
            gL = model.readout()
            prod = gL * h[-1]
            f = prod.mean(1)
            rec["f"][k] = f
            rec["f_se"][k] = prod.std(1) / math.sqrt(P)
            rec["loss"][k] = lossf(f, yt[k])
            chi = lossf.grad(f, yt[k])
            rec["dloss"][k] = chi
            model.backward(h, gL, rec["theta_pivot"][k], work)
        except FloatingPointError as err:
            raise FloatingPointError(
                f"non-finite values at SGD step {k}, {err}; lower eta_c or T") from err
        g = hist.g[:, n:n + B]
        rec["h2"][k] = torch.linalg.vector_norm(h, dim=(1, 2)).square() / (B * P)
        rec["g2"][k] = torch.linalg.vector_norm(g, dim=(1, 2)).square() / (B * P)
        if paths:
            rec["h_path"][k] = h[..., :paths]
            rec["g_path"][k] = g[..., :paths]
        hist.hL[n:n + B] = h[-1]
        hist.coef[n:n + B] = eta_c * chi / B
        hist.n = n + B
        _check_step(rec, k)
        if k in eig_index:
            sig, th = model.min_eigenvalues()
            rec["sigma_min_eig"][eig_index[k]] = sig
            rec["theta_min_eig"][eig_index[k]] = th
    for drv in drivers:
        drv.finalize()

    out = {key: val.cpu().numpy() for key, val in rec.items()}
    times = np.arange(L + 1) * (T / L)
    coords = {"step": np.arange(K), "sample": np.arange(B), "time": times,
              "probe": np.arange(Q), "probe_step": np.asarray(probe_steps, int),
              "eig_step": np.asarray(eig_steps, int)}
    data = {
        "f": (("step", "sample"), out["f"]),
        "f_se": (("step", "sample"), out["f_se"]),
        "y": (("step", "sample"), yn.reshape(K, B)),
        "loss": (("step", "sample"), out["loss"]),
        "dloss": (("step", "sample"), out["dloss"]),
        "h2": (("step", "time"), out["h2"]),
        "g2": (("step", "time"), out["g2"]),
        "sigma_pivot": (("step", "time"), out["sigma_pivot"]),
        "theta_pivot": (("step", "time"), out["theta_pivot"]),
        "sigma_min_eig": (("eig_step", "time"), out["sigma_min_eig"]),
        "theta_min_eig": (("eig_step", "time"), out["theta_min_eig"]),
        "probe_f": (("probe_step", "probe"), out["probe_f"]),
        "probe_f_se": (("probe_step", "probe"), out["probe_f_se"]),
        "probe_loss": (("probe_step", "probe"), out["probe_loss"]),
        "probe_y": (("probe",), np.zeros(0) if yp is None else yp),
    }
    if paths:
        coords["particle"] = np.arange(paths)
        for name in ("h_path", "g_path"):
            data[name] = (("particle", "step", "sample", "time"),
                          out[name].transpose(3, 0, 2, 1))
    attrs = base_attrs(
        model="nfd", backward=backward, activation=act.name, loss=lossf.name,
        eta_c=eta_c, T=T, steps=L, depth=L, particles=P, batch_size=B, sgd_steps=K,
        input_dim=d, seed=seed, device=str(device), dtype=str(dtype).split(".")[-1],
        rel_jitter=rel_jitter, alpha="1/sqrt(n)", learning_rate="eta_c*n",
    )
    ds = xr.Dataset(data, coords=coords, attrs=attrs)
    _annotate(ds)
    return ds


def check_stream(X, y, *, eta_c, T, steps, batch_size, backward, loss, probes,
                 probe_steps) -> tuple:
    """Checks of the training stream and its hyperparameters shared by
    :func:`simulate` and :func:`nfd.linear_limit`.

    Returns ``(X, y, eta_c, T, L, B, loss, X_probe, y_probe, probe_steps)`` as
    validated arrays, numbers and a :class:`Loss`; the probes are ``None`` and the
    step list empty without probes. The messages name the argument.
    """
    Xn = check_matrix("X", X)
    N, d = Xn.shape
    yn = check_targets("y", y, N)
    eta_c = check_positive_float("eta_c", eta_c, allow_zero=True)
    T = check_positive_float("T", T)
    L = check_int("steps", steps, 1)
    B = check_int("batch_size", batch_size, 1)
    check_choice("backward", backward, BACKWARD_LIMITS)
    if N % B:
        raise ValueError(f"batch_size={B} does not divide the {N} training rows of X")
    lossf = get_loss(loss)
    if lossf.name == "logistic" and not np.all(np.isin(yn, (-1.0, 1.0))):
        raise ValueError("y must hold labels ±1 for loss='logistic'")
    if probes is None:
        return Xn, yn, eta_c, T, L, B, lossf, None, None, []
    if not isinstance(probes, (tuple, list)) or len(probes) != 2:
        raise TypeError("probes must be a pair (X_probe, y_probe)")
    Xp = check_matrix("probes[0]", probes[0], columns=d)
    yp = check_targets("probes[1]", probes[1], Xp.shape[0])
    probe_steps = (_default_steps(N // B, 33, True) if probe_steps is None
                   else _check_steps("probe_steps", probe_steps, N // B))
    return Xn, yn, eta_c, T, L, B, lossf, Xp, yp, probe_steps


def _check_innovations(innovations, shape: tuple, device, dtype) -> tuple:
    """The pair of driver innovations, moved to ``device``, or (None, None)."""
    if innovations is None:
        return None, None
    if not isinstance(innovations, (tuple, list)) or len(innovations) != 2:
        raise TypeError("innovations must be a pair (forward, backward) of tensors")
    out = []
    for name, xi in zip(("innovations[0]", "innovations[1]"), innovations):
        if not isinstance(xi, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(xi).__name__}")
        if tuple(xi.shape) != shape:
            raise ValueError(f"{name} must have shape (steps, K·B, particles) = {shape}, "
                             f"got {tuple(xi.shape)}")
        if xi.dtype != dtype:
            raise ValueError(f"{name} has dtype {xi.dtype} but the run's dtype is {dtype}; "
                             "pass dtype= to simulate or convert the innovations")
        if not bool(torch.isfinite(xi).all()):
            raise ValueError(f"{name} holds NaN or inf; innovations are standard normals")
        out.append(xi.detach().to(device=device))
    if out[0].data_ptr() == out[1].data_ptr():
        raise ValueError("innovations must be two independent tensors: the forward and "
                         "backward drivers' noises are independent")
    return tuple(out)


def _check_probes(fp: torch.Tensor, hp: torch.Tensor, step: int) -> None:
    """One host synchronisation per probe evaluation: locate the first non-finite
    layer of the probes' features (L+1, Q, P), or blame the readout."""
    if bool(torch.isfinite(fp).all()):
        return
    bad = (~torch.isfinite(hp).flatten(1).all(1)).nonzero()
    where = (f"features at step {step}, layer {int(bad[0])} (forward pass)" if len(bad)
             else f"output f at step {step} (readout)")
    raise FloatingPointError(f"non-finite probe {where} in the probe evaluation; "
                             "lower eta_c or T")


def _check_step(rec: dict, k: int) -> None:
    """One host synchronisation per SGD step: locate the first non-finite layer."""
    h2, g2, f = rec["h2"][k], rec["g2"][k], rec["f"][k]
    if bool(torch.isfinite(h2).all() & torch.isfinite(g2).all() & torch.isfinite(f).all()):
        return
    bad_h = (~torch.isfinite(h2)).nonzero()
    if len(bad_h):
        raise FloatingPointError(
            f"non-finite features at SGD step {k}, layer {int(bad_h[0])} (forward pass); "
            "lower eta_c or T"
        )
    bad_g = (~torch.isfinite(g2)).nonzero()
    if len(bad_g):
        raise FloatingPointError(
            f"non-finite gradients at SGD step {k}, layer {int(bad_g[-1])} (backward "
            "pass, counted from the output); lower eta_c or T"
        )
    raise FloatingPointError(f"non-finite output f at SGD step {k}; lower eta_c or T")


_LONG_NAMES = {
    "f": "NFD output f̊ = E[g_L h_L] on the training sample, before the update",
    "f_se": "Monte Carlo standard error of f",
    "loss": "training loss at f",
    "dloss": "dℒ/df at f (χ, before batch averaging)",
    "h2": "E[h_t²] (batch mean)",
    "g2": "E[g_t²] (batch mean)",
    "sigma_pivot": "smallest eigenvalue of the new block of the forward driver",
    "theta_pivot": "smallest eigenvalue of the new block of the backward driver",
    "sigma_min_eig": "smallest eigenvalue of Σ_t = E[φ(h^(i))φ(h^(j))]",
    "theta_min_eig": "smallest eigenvalue of Θ_t = E[g^(i) g^(j)]",
    "probe_f": "NFD output on held-out probes",
    "probe_loss": "loss on held-out probes",
}


def _annotate(ds: xr.Dataset) -> None:
    for name, text in _LONG_NAMES.items():
        if name in ds:
            ds[name].attrs["long_name"] = text
