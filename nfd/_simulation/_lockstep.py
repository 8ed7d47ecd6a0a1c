"""The forward and backward passes of one or more particle systems in lockstep: a run
and its error replicas (``nfd._simulation._errors``) layer by layer together.

A run's layer-step is two k×P history streams and about thirty small operations on
vectors of length k (borders, Stein derivatives, weights), each costing about its
dispatch. An error replica of P/8 particles paid all of those again after its run:
at P = 4096, L = 64, K = 200 two replicas cost +136% (coupled) and +113% (decoupled)
of the run, and +78% and +89% in lockstep (``benchmarks/bench_simulate.py
--errors-only``, both in one session; coupled replicas of 800 = 4·K·B, the floor
then: +72% again on 2026-11-29, and +103% with today's 1600 = 8·K·B). Every
replica sees the same training stream,
so its history has as many rows as the run's at every layer-step; here each keeps its
own particles, history and streams (:class:`Model`), and the small algebra is made
once for all of them: the drivers of the group are a :class:`sde.DriverGroup`, and
the Gram means, weights and pivots are stacked over a leading group axis. The
products with each run's own matrices are made per run, exactly as alone, and
elementwise operations give every element the same bits whatever the layout; the
stacked operands of those products are laid out per run as alone (row-major, each
run's slab aligned, :func:`sde.grouped`; the history sums always row-major,
:meth:`~nfd._simulation._streams.Pass.products`). So every run of a group holds
exactly the numbers it holds alone (tests/test_lockstep.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from sde import DriverGroup, grouped

from ._model import Model, moments

__all__ = ["Lockstep", "Solo"]


class Lockstep:
    """The passes of G one-layer-block runs (:class:`Model`, each with its own
    particles, history and drivers) of the same stream, configuration and optimizer
    state, made together (module docstring). The models' :meth:`Model.set_step`
    must give every run the same factor a_k (they share the optimizer's
    coefficients); their trajectory weights differ with their χ."""

    def __init__(self, models: Sequence[Model]) -> None:
        self.models = list(models)
        first = self.models[0]
        self.act, self.L, self.tau, self.coupled = first.act, first.L, first.tau, first.coupled
        self._group()

    #: The group of the members' drivers (``StaticLockstep``: static drivers)
    driver_group = DriverGroup

    def _group(self) -> None:
        """The drivers, particle counts and weight buffers of the current members."""
        self.fwd = self.driver_group([m.fwd for m in self.models])
        self.bwd = self.driver_group([m.bwd for m in self.models])
        first = self.models[0]
        self._P = torch.tensor([float(m.P) for m in self.models], dtype=torch.float64,
                               device=first.u.device)[:, None, None]
        self._scales = list(self._P.unbind(0))  # each run's (1, 1): made once
        self._wbuf: dict[tuple[str, int], torch.Tensor] = {}

    def keep(self, members: Sequence[int]) -> None:
        """Go on with the ``members`` only (indices into :attr:`models`, in order):
        a diverged error replica leaves the group."""
        self.models = [self.models[i] for i in members]
        self._group()

    def _weight_views(self, role: str, B: int, n: int, rows: int,
                      responses: int) -> tuple:
        """Views, made once per pass, of the zero-filled (G, B, rows, 2) weight buffer
        of one kind of pass (each kind keeps its own zeros): the drift on the first
        ``n`` history rows, the first ``responses`` history rows (coupled), the
        innovations, and each run's interleaved (B, 2·rows) whole."""
        key = (role, B)
        if key not in self._wbuf:
            phi = self.models[0].hist.phi
            self._wbuf[key] = grouped(len(self.models), (B, phi.shape[1], 2), phi.dtype,
                                      phi.device).zero_()
        buf = self._wbuf[key]
        whole = buf[:, :, :rows].view(len(self.models), B, 2 * rows)
        return (buf[:, :, :n, 0], buf[:, :, :responses, 0], buf[:, :, :rows, 1],
                whole.unbind(0))

    def _weights(self, views: tuple, draw: torch.Tensor, gram: torch.Tensor,
                 decay: torch.Tensor, responses: torch.Tensor | None) -> None:
        """Each run's interleaved weights (B, 2·rows) on a layer's row pairs (history,
        innovation), written into the buffer of :meth:`_weight_views` in the run's
        dtype.

        On the innovations: √τ a_k times the driver's ``draw`` (G, B, rows). On the
        history: the drift −τ w_i Σ[i, k] over the n earlier trajectories (``gram``
        (G, n, B) is the Gram column Σ_{ℓ−1}[:, k] forward, Θ_ℓ[:, k] backward;
        ``decay`` (G, 1, n) holds −τ w_i, w = :attr:`Model.coef`), plus, coupled, √τ a_k
        times the response functions ``responses`` (G, rows', B): forward
        A_ℓ(k, s) = E[∂φ(h_{ℓ−1}^{(k)})/∂z̃_ℓ^{(s)}] (rows' = n), backward
        B_ℓ(k, s) = E[∂g_ℓ^{(k)}/∂z_ℓ^{(s)}] (rows' = n + B: g_ℓ^{(k)} depends on this
        step's forward source through φ′ of the layers above), paper 000 eq. 38 with
        SGD steps, estimated by Stein's lemma
        (:meth:`sde.GrowingGaussianDriver.stein_from_moment`). History rows without
        a weight get exactly 0: the buffer is only ever written up to the rows of
        its pass, and a pass has at least as many rows as the one before.
        """
        drift, response, innovations, _ = views
        noise = self._noise()
        if responses is None:
            torch.mul(gram.transpose(1, 2), decay, out=drift)
        else:
            torch.mul(responses.transpose(1, 2), noise, out=response)
            drift.addcmul_(gram.transpose(1, 2), decay)
        torch.mul(draw, noise, out=innovations)

    def _responses(self, drivers, t: int, moment: torch.Tensor) -> torch.Tensor:
        """The response functions (G, rows', B) of every run from its Stein moments
        ``moment`` at time index ``t``, by Stein's lemma with the other pass's ``drivers``
        (:meth:`sde.DriverGroup.stein_from_moment`; ``ReferenceLockstep``: a reference
        system's, ``nfd.reference_responses``)."""
        return drivers.stein_from_moment(t, moment)

    def _noise(self):
        """a_k·τ^α, the scale of the drivers and response terms (the runs share the
        optimizer's state): a host number here."""
        return self.models[0].noise

    def _moments(self, ops: list, t: int, new: list[torch.Tensor]) -> tuple:
        """The Gram columns (G, rows, B) and, coupled, the Stein moments of each run's
        new block (expanded to its pass's pieces, :func:`_pieces`) against its
        layer-t rows, in float64: each run's particle means straight into its slab
        of one :func:`sde.grouped` tensor (a new one every layer: the border keeps
        it, ``copy=False``)."""
        padded = max(o.padded for o in ops)
        means = grouped(len(ops), (padded, new[0].shape[1]), torch.float64, new[0].device)
        for o, x, m, p in zip(ops, new, means.unbind(0), self._scales):
            o.products(t, x, p, m)
        return moments(means[:, :ops[0].count], self.coupled)

    def _decay(self) -> torch.Tensor:
        """−τ w_i of every run's committed trajectories (G, 1, n): the weights of the
        Gram rows (G, B, n) in :meth:`_weights`."""
        return (torch.stack([m.coef for m in self.models]) * -self.tau)[:, None]

    def forward(self, x: torch.Tensor, outs: Sequence[torch.Tensor],
                pivs: Sequence[torch.Tensor], floors: Sequence[torch.Tensor]) -> list:
        """Forward pass of the training block x (B, d) → each run's h path ``outs``
        (L+1, B, P): the h_0 and h_ℓ equations of the ``nfd._simulation._simulate``
        module docstring (paper 002, Definition 1, with the response drift of paper
        000 eq. 38 when coupled). The block's noise is appended to each run's forward
        driver, its activations to its history; the new pivots go to ``pivs`` and
        the floored driver components to ``floors`` (per time t_ℓ, ℓ < L)."""
        models = self.models
        n, B = models[0].hist.n, x.shape[0]
        for m, h in zip(models, outs):
            m.embed(x, h[0])
        decay = self._decay()
        ops = [m.hist.forward_pass(n + B, h, self.coupled) for m, h in zip(models, outs)]
        paths = [o.paths[0] for o in ops]
        views = self._weight_views("forward", B, n, n + B, n)
        mixes = _pieces(ops, views[3])
        rows = [m.hist.phi[:, n:n + B] for m in models]  # (L, B, P): the block's φ rows
        phis = [r.unbind(0) for r in rows]
        news = [_expanded(r, o.gram_pieces) for r, o in zip(rows, ops)]
        hs = [h.unbind(0) for h in outs]
        pivots, skips = [], []
        for l in range(1, self.L + 1):
            t = l - 1
            for h, phi in zip(hs, phis):
                self.act.phi_into(h[t], phi[t])
            gram, mom = self._moments(ops, t, [new[t] for new in news])
            weights, min_eig, skip = self.fwd.border(t, gram, copy=False)
            resp = self._responses(self.bwd, t, mom[:, :n]) if self.coupled else None
            self._weights(views, weights, gram[:, :n], decay, resp)
            for m, o, path, w, phi, h in zip(models, ops, paths, mixes, phis, hs):
                o.mix(l, w, path[l], path[t])
                if m.dense is not None:
                    m.dense.forward(l, phi[t], h[l])
            pivots.append(min_eig)
            skips.append(skip)
        _record_pivots(pivots, skips, pivs, floors, slice(None, -1))
        return list(outs)

    def forward_probes(self, x: torch.Tensor, outs: Sequence[torch.Tensor],
                       phis: Sequence[torch.Tensor]) -> list:
        """Forward pass of held-out inputs x (Q, d) → each run's h path ``outs``
        (L+1, Q, P), each probe's noise conditioned on the training history alone
        and not appended to it (:meth:`sde.GrowingGaussianDriver.condition`).
        ``phis`` are (Q, P) buffers: buffers kept across evaluations avoid faulting
        in fresh pages every layer, which cost as much as the probes' products
        (measured on CPU).

        A probe's output is a particle mean, so only each probe's own law matters:
        all probes share one fresh standard normal per layer and particle (drawn
        from each run's ``probe_gen``; kept across evaluations under
        ``nfd.Record.paired_probes``: :meth:`~nfd._simulation._model.Model.probe_normals`),
        scaled by each probe's conditional standard
        deviation. Every probe keeps exactly its conditional law given the history;
        only the correlation between probes changes. This costs L·P normals per
        evaluation instead of L·Q·P."""
        models = self.models
        n = models[0].hist.n
        for m, h in zip(models, outs):
            m.embed(x, h[0])
        decay = self._decay()
        fresh = [m.probe_normals(self.L, m.P, device=x.device, dtype=x.dtype)
                 for m in models]
        ops = [m.hist.forward_pass(n, h, self.coupled) for m, h in zip(models, outs)]
        paths = [o.paths[0] for o in ops]
        views = self._weight_views("probes", x.shape[0], n, n, n)
        mixes = _pieces(ops, views[3])
        news = [phi.expand(o.gram_pieces, *phi.shape) for phi, o in zip(phis, ops)]
        noise = models[0].noise
        scaled = grouped(len(models), (x.shape[0],), x.dtype, x.device)
        for l in range(1, self.L + 1):
            t = l - 1
            for h, phi in zip(outs, phis):
                self.act.phi_into(h[t], phi)
            norms = torch.stack([torch.linalg.vector_norm(phi, dim=1) for phi in phis])
            var = norms.double().square_().div_(self._P[:, 0])
            gram, mom = self._moments(ops, t, news)
            weights, pivots, _ = self.fwd.condition(t, gram, var)
            resp = self._responses(self.bwd, t, mom) if self.coupled else None
            self._weights(views, weights, gram, decay, resp)
            torch.mul(pivots, noise, out=scaled)
            for m, o, path, w, phi, h, z, s in zip(models, ops, paths, mixes, phis, outs,
                                                    fresh, scaled.unbind(0)):
                o.mix(l, w, path[l], path[t])
                if m.dense is not None:
                    m.dense.forward(l, phi, h[l])
                h[l].addr_(s, z[t])
        return list(outs)

    def backward(self, hs: Sequence[torch.Tensor], gLs: Sequence[torch.Tensor],
                 pivs: Sequence[torch.Tensor], floors: Sequence[torch.Tensor],
                 works: Sequence[torch.Tensor]) -> None:
        """Backward pass of the committed block with each run's forward path ``hs``
        (L+1, B, P) from its readout ``gLs``: the g_{ℓ−1} equation of the
        ``nfd._simulation._simulate`` module docstring (paper 002, Definition 1,
        with the response drift of paper 000 eq. 38 when coupled).

        The gradients are written straight into each run's history
        ``hist.g[:, n:n+B]``, the pivots into ``pivs`` and the floored driver
        components into ``floors``; ``works`` are (2, B, P) buffers for the
        increments and φ′.
        """
        models = self.models
        n, B = models[0].hist.n, hs[0].shape[1]
        for m, gL in zip(models, gLs):
            m.hist.g[self.L, n:n + B] = gL
        decay = self._decay()
        ops = [m.hist.backward_pass(n + B, w[0], self.coupled) for m, w in zip(models, works)]
        outs = [o.paths[0][0] for o in ops]
        views = self._weight_views("backward", B, n, n + B, n + B)
        mixes = _pieces(ops, views[3])
        rows = [m.hist.g[:, n:n + B] for m in models]  # (L+1, B, P): the block's g rows
        gs = [r.unbind(0) for r in rows]
        news = [_expanded(r, o.gram_pieces) for r, o in zip(rows, ops)]
        hts = [h.unbind(0) for h in hs]
        pivots, skips = [], []
        for l in range(self.L, 0, -1):
            t = l - 1
            gram, mom = self._moments(ops, l, [new[l] for new in news])
            weights, min_eig, skip = self.bwd.border(t, gram, copy=False)
            resp = self._responses(self.fwd, t, mom) if self.coupled else None
            self._weights(views, weights, gram[:, :n], decay, resp)
            for m, o, out, w, g, h, work in zip(models, ops, outs, mixes, gs, hts, works):
                o.mix(t, w, out)
                incr, dphi = work
                if m.dense is not None:
                    m.dense.backward(l, g[l], incr)
                    m.dense.update_layer(l, g[l], m.hist.phi_at[t][n:n + B])
                self.act.dphi_into(h[t], dphi)
                torch.addcmul(g[l], dphi, incr, out=g[t])
            pivots.append(min_eig)
            skips.append(skip)
        _record_pivots(pivots[::-1], skips[::-1], pivs, floors, slice(1, None))


def _pieces(ops: list, whole: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each run's weight buffer (B, 2·rows) expanded to the pieces of its pass's mix
    (a view, made once per pass: the buffer is rewritten in place every layer)."""
    return [w.expand(o.mix_pieces, *w.shape) for o, w in zip(ops, whole)]


def _expanded(rows: torch.Tensor, pieces: int) -> tuple[torch.Tensor, ...]:
    """Per layer, the block's rows (layers, B, P) expanded to (pieces, B, P): the
    operand of :meth:`~nfd._simulation._streams.Pass.products`, made once per pass."""
    return rows.unsqueeze(1).expand(rows.shape[0], pieces, *rows.shape[1:]).unbind(0)


def _record_pivots(pivots: list, skips: list, pivs: Sequence[torch.Tensor],
                   floors: Sequence[torch.Tensor], at: slice) -> None:
    """Each run's pivots (from the per-layer (G, 1) smallest pivots) and floored
    counts (from the per-layer (G, B) skip masks) into its ``pivs`` and ``floors``
    at the times ``at``."""
    piv = torch.cat(pivots, 1)
    floored = torch.stack(skips).sum(2)
    for g, (p, f) in enumerate(zip(pivs, floors)):
        p[at] = piv[g]
        f[at] = floored[:, g]


class Solo:
    """The interface of :class:`Lockstep` for one model with passes of its own
    (two-layer blocks, :class:`~nfd._simulation._twolayer.TwoLayerModel`): its runs
    go one after the other."""

    def __init__(self, model) -> None:
        self.models = [model]

    def keep(self, members: Sequence[int]) -> None:
        """Nothing to drop: a solo group has only its run."""

    def forward(self, x, outs, pivs, floors) -> list:
        """The model's own :meth:`forward` on the one run."""
        return [self.models[0].forward(x, outs[0], pivs[0], floors[0])]

    def forward_probes(self, x, outs, phis) -> list:
        """The model's own :meth:`forward_probes` on the one run."""
        return [self.models[0].forward_probes(x, outs[0], phis[0])]

    def backward(self, hs, gLs, pivs, floors, works) -> None:
        """The model's own :meth:`backward` on the one run."""
        self.models[0].backward(hs[0], gLs[0], pivs[0], floors[0], works[0])
