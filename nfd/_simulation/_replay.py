"""The passes of ``nfd.simulate`` with every shape fixed, replayed from CUDA graphs:
the opt-in :func:`graph_replay` (issue 49).

On a GPU a layer-step of :class:`~nfd._simulation._lockstep.Lockstep` is about a
hundred small kernels, each costing its launch (about 1 ms per layer-step on an H200,
whatever P: launch-bound). A CUDA graph replays a captured sequence of kernels with
one launch, but only on the shapes and addresses it was captured with, and
:class:`~nfd._simulation._lockstep.Lockstep` reads k history rows at step k, slices
its new block at row k on the host, and borders drivers that grow. Here every pass is
static:

- the history products and mixes read all the history's rows (those not yet written
  are zero, and so are their weights: they add exact zeros);
- the drivers are :class:`sde.StaticGaussianDriver`: whole-capacity inverse factors,
  the new block's position on the device;
- the new block's φ (forward) and g (backward) are made in buffers of their own and
  copied into the history at the drivers' positions (``index_copy_``);
- what changes from step to step on the host (the drift weights −τ·w_i, the noise
  scale a_k·τ^α, the probes' fresh normals, the pivots' record slots) goes through
  buffers filled before the pass and read after it.

So one pass is the same kernels on the same buffers at every step: on CUDA the first
pass of each kind runs eagerly (the warm-up), the second is captured and every later
one replays it (:class:`Replayer`). On a CPU the same static passes run eagerly, with
the numbers of the replayed path, so that they can be tested anywhere. They agree with
:class:`~nfd._simulation._lockstep.Lockstep`'s within rounding, not bit for bit: longer
sums of the same terms (tests/test_graph_replay.py states the tolerances). Not yet
run on a GPU: the capture and its replays are unverified until a device is lent
(docs/guide/gpu.md).

One-layer blocks under SGD (any schedule, momentum, weight decay, γ₀) only:
``nfd.Adam``'s dense states, two-layer blocks, Tensor Programs VI's block and an
activation whose φ′ comes from autograd are refused (:func:`check_replayable`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence

import torch

from sde import StaticDriverGroup

from ._lockstep import Lockstep, _expanded, _pieces
from ._model import Model

__all__ = ["graph_replay", "replaying", "check_replayable", "StaticLockstep", "Replayer"]

#: The prefix of the profiler range of each replayed pass (:meth:`Replayer.run`)
PROFILE_RANGE = "nfd.graph_replay."

#: Whether ``simulate`` runs built now in this thread replay their passes (:func:`graph_replay`)
_replay = contextvars.ContextVar("graph_replay", default=False)


@contextlib.contextmanager
def graph_replay() -> Iterator[None]:
    """Runs of :func:`nfd.simulate` inside the block make every pass with shapes that
    do not change from one SGD step to the next, and on CUDA replay each kind of pass
    (forward, backward, probes) from a CUDA graph captured at its second call,
    instead of launching its kernels one by one (``nfd._simulation._replay``).

    Opt-in and **not yet run on a GPU**: on a CPU the static passes run eagerly and
    are tested against the default path (within rounding: they sum the history's
    unwritten zero rows too, so a pass streams the whole capacity, about twice the
    default's average, which costs time on a CPU and pays only where launches
    dominate). ``simulate`` records ``attrs["graph_replay"]``. One-layer blocks under
    SGD only (``nfd._simulation._replay.check_replayable``). As
    :func:`sde.fused_borders`, the setting holds for runs started in this thread.
    """
    token = _replay.set(True)
    try:
        yield
    finally:
        _replay.reset(token)


def replaying() -> bool:
    """Whether runs started now, in this thread, replay their passes (:func:`graph_replay`)."""
    return _replay.get()


def check_replayable(cfg) -> None:
    """``ValueError`` for a configuration the static passes do not make (under
    :func:`graph_replay`): Adam's dense states, two-layer blocks, Tensor Programs VI's
    block, and an activation whose derivative comes from autograd."""
    if cfg.adam is not None:
        raise ValueError("nfd.graph_replay() runs SGD only (nfd.SGD, any schedule, momentum "
                         "or weight decay): run Adam or AdamW outside the block")
    if cfg.solo:
        raise ValueError(f"nfd.graph_replay() runs one-layer blocks only, not "
                         f"{cfg.block!r} blocks: run them outside the block")
    if getattr(cfg.act.dphi, "by_autograd", False):
        raise ValueError(f"nfd.graph_replay() needs the activation's derivative in closed "
                         f"form: activation {cfg.act.name!r} takes φ′ by autograd, whose "
                         "backward a CUDA graph cannot capture; give nfd.Activation(name, "
                         "phi, dphi) or run outside the block")


class Replayer:
    """Runs a pass function eagerly, or, on CUDA, eagerly at its first call (the
    warm-up: libraries, workspaces and constants are made then), captured into a CUDA
    graph at its second and replayed from it at every later one. The function must
    read and write the same tensors at every call (:class:`StaticLockstep`'s buffers).
    The warm-up and the capture run on one side stream of the replayer's own, as
    ``torch.cuda.make_graphed_callables`` does (a stream's first cuBLAS call sets up
    its workspace, which must not happen during a capture)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.calls: dict[str, int] = {}
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}

    def run(self, role: str, fn: Callable[[], None]) -> None:
        """Run ``fn``, the pass ``role``, as the class docstring says, inside a profiler
        range named ``PROFILE_RANGE + role`` (so that a profile can tell the replayed
        passes' work from the rest: ``benchmarks/bench_simulate.py``)."""
        calls = self.calls.get(role, 0)
        self.calls[role] = calls + 1
        with torch.profiler.record_function(PROFILE_RANGE + role):
            if not self.cuda:
                fn()
            elif calls == 0:
                self._on_side_stream(fn)
            else:
                if role not in self.graphs:
                    graph = torch.cuda.CUDAGraph()
                    self.stream.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.graph(graph, stream=self.stream):  # recorded, not run
                        fn()
                    self.graphs[role] = graph
                self.graphs[role].replay()

    def _on_side_stream(self, fn: Callable[[], None]) -> None:
        """``fn`` on :attr:`stream`, ordered after and before the current stream's work."""
        current = torch.cuda.current_stream()
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            fn()
        current.wait_stream(self.stream)

    def reset(self) -> None:
        """Forget the captured graphs (the runs changed: a replica left)."""
        self.calls, self.graphs = {}, {}


class StaticLockstep(Lockstep):
    """:class:`~nfd._simulation._lockstep.Lockstep`'s passes with every shape fixed
    (module docstring): its runs' drivers are :class:`sde.StaticGaussianDriver`, and
    each pass reads and writes the same buffers at every step, so that
    :class:`Replayer` can replay it. The numbers are Lockstep's within rounding."""

    def __init__(self, models: Sequence[Model]) -> None:
        self.replayer = Replayer(models[0].u.device)  # before Lockstep's _group()
        super().__init__(models)

    driver_group = StaticDriverGroup

    def _group(self) -> None:
        """:meth:`Lockstep._group` (drivers, particle counts, weight buffers), and per
        run the buffers of the static passes (the new block's rows, the drift weights,
        the noise scale, the pivots)."""
        super()._group()
        first = self.models[0]
        hist, dev = first.hist, first.u.device
        G, L, R, B = len(self.models), self.L, hist.phi.shape[1], first.fwd.block
        self.capacity = first.fwd.capacity
        self.rows = R
        kw = dict(device=dev, dtype=hist.phi.dtype)
        #: the new block's φ(h_{ℓ−1}) (L, B, P) and g_ℓ (L+1, B, P) of each run
        self.phi_new = [torch.zeros(L, B, m.P, **kw) for m in self.models]
        self.g_new = [torch.zeros(L + 1, B, m.P, **kw) for m in self.models]
        #: −τ w_i over all history rows (G, 1, R), zero beyond the committed ones
        self.decay = torch.zeros(G, 1, R, dtype=hist.coef.dtype, device=dev)
        #: a_k·τ^α, the scale of the drivers and response terms
        self.noise = torch.zeros((), dtype=torch.float64, device=dev)
        #: each pass's smallest pivots (G, L) and floored counts (G, L)
        self.pivots = torch.zeros(G, L, dtype=torch.float64, device=dev)
        self.floored = torch.zeros(G, L, dtype=torch.int64, device=dev)
        #: each run's (L, P) buffer of the probes' fresh normals
        self.fresh = [torch.empty(L, m.P, **kw) for m in self.models]
        self._passes: dict[str, list] = {}
        self._buffers: dict[tuple, torch.Tensor] = {}
        self.replayer.reset()

    def _prologue(self) -> None:
        """The step's host numbers into the passes' buffers: the drift weights and the
        noise scale (the optimizer's state, ``Model.set_step``). The committed
        trajectories only grow, so the weights beyond them stay the zeros they were
        made with."""
        for d, m in zip(self.decay.unbind(0), self.models):
            d[0, :m.coef.shape[0]] = m.coef * -self.tau
        self.noise.fill_(self.models[0].noise)

    def _static_passes(self, role: str, make: Callable) -> list:
        """Each run's :class:`~nfd._simulation._streams.Pass` of one kind over all the
        history's rows, made once (``make(g, model)`` for run g): its buffers are the
        same at every step."""
        if role not in self._passes:
            self._passes[role] = [make(g, m) for g, m in enumerate(self.models)]
        return self._passes[role]

    def _noise(self) -> torch.Tensor:
        """a_k·τ^α from its device buffer (filled by :meth:`_prologue`), so that a
        replayed pass reads each step's value."""
        return self.noise

    def forward(self, x, outs, pivs, floors) -> list:
        """:meth:`Lockstep.forward` with fixed shapes: the embedding and the drivers'
        draws eagerly, then the layers (:meth:`_forward_layers`, replayed on CUDA),
        then the pivots into the record and the forward drivers' count moved on."""
        for m, h in zip(self.models, outs):
            m.fwd.draw()
            m.bwd.draw()
            m.embed(x, h[0])
        self._prologue()
        ops = self._static_passes("forward", lambda g, m: m.hist.forward_pass(
            self.rows, outs[g], self.coupled))
        self.replayer.run("forward", lambda: self._forward_layers(ops, outs))
        for d in self.fwd.drivers:
            d.advance()
        self._record(pivs, floors, slice(None, -1))
        return list(outs)

    def _forward_layers(self, ops: list, outs: Sequence[torch.Tensor]) -> None:
        """The L forward layer-steps (the h_ℓ equation of ``nfd._simulation._simulate``),
        every shape fixed: φ of the new block into its buffer and the history, the
        Gram column over all rows, the border at the drivers' positions, the weights,
        the mix."""
        R, B = self.rows, self.fwd.drivers[0].block
        views = self._weight_views("forward", B, R, R, R)
        mixes, paths = _pieces(ops, views[3]), [o.paths[0] for o in ops]
        news = [_expanded(p, o.gram_pieces) for p, o in zip(self.phi_new, ops)]
        for l in range(1, self.L + 1):
            t = l - 1
            for m, h, phi in zip(self.models, outs, self.phi_new):
                self.act.phi_into(h[t], phi[t])
                m.hist.phi_at[t].index_copy_(0, m.fwd.positions, phi[t])
            gram, mom = self._moments(ops, t, [new[t] for new in news])
            draw = self._border(self.fwd, t, gram)
            resp = self._stein(self.bwd, t, mom) if self.coupled else None
            self._weights(views, draw, gram, self.decay, resp)
            for o, path, w in zip(ops, paths, mixes):
                o.mix(l, w, path[l], path[t])

    def _zeros(self, key: str, like: torch.Tensor, shape: tuple) -> torch.Tensor:
        """A float64 buffer of ``shape`` zeroed once, kept under (``key``, ``shape``):
        the static passes write the same entries of it at every layer (those beyond a
        driver's capacity stay zero), so that no layer allocates or zeroes one, and a
        captured pass keeps writing where it was captured (a buffer is never replaced)."""
        buf = self._buffers.get((key, shape))
        if buf is None:
            buf = self._buffers[key, shape] = torch.zeros(shape, dtype=torch.float64,
                                                          device=like.device)
        return buf

    def _border(self, group: StaticDriverGroup, t: int, gram: torch.Tensor) -> torch.Tensor:
        """The group's static borders at time index ``t`` from each run's Gram column
        (G, R, B): the cross-covariance in the first rows, the block at the drivers'
        positions. Returns the draws' weights (G, B, R) (zero beyond the capacity); the
        smallest pivots and floored counts go to column ``t`` of :attr:`pivots`,
        :attr:`floored`."""
        G, R, B = gram.shape
        N, pos = self.capacity, group.drivers[0].positions  # every run's count is the same
        draw = self._zeros("draw", gram, (G, B, R))
        w, min_eig, skip = group.border(t, gram[:, :N], gram.index_select(1, pos))
        draw[:, :, :N] = w
        self.pivots[:, t] = min_eig[:, 0]
        self.floored[:, t] = skip.sum(1)
        return draw

    def _stein(self, group: StaticDriverGroup, t: int, mom: torch.Tensor) -> torch.Tensor:
        """Each run's Stein derivatives (G, R, B) at ``t`` from its moments over all
        history rows (zero beyond the drivers' committed components)."""
        out = self._zeros("stein", mom, tuple(mom.shape))
        N = self.capacity
        group.stein_from_moment(t, mom[:, :N], out[:, :N])
        return out

    def _record(self, pivs, floors, at: slice) -> None:
        """The pass's pivots and floored counts into each run's record slots."""
        for g, (p, f) in enumerate(zip(pivs, floors)):
            p[at] = self.pivots[g]
            f[at] = self.floored[g]

    def forward_probes(self, x, outs, phis) -> list:
        """:meth:`Lockstep.forward_probes` with fixed shapes: the embedding and the
        probes' fresh normals eagerly, then the layers (:meth:`_probe_layers`)."""
        self._prologue()
        for m, h in zip(self.models, outs):
            m.embed(x, h[0])
        fresh = self.fresh
        for m, f in zip(self.models, fresh):
            f.copy_(m.probe_normals(self.L, m.P, device=x.device, dtype=x.dtype))
        ops = self._static_passes("probes", lambda g, m: m.hist.forward_pass(
            self.rows, outs[g], self.coupled))
        self.replayer.run("probes", lambda: self._probe_layers(ops, outs, phis, fresh))
        return list(outs)

    def _probe_layers(self, ops: list, outs, phis, fresh) -> None:
        """The L probe layer-steps: each probe conditioned on the training history
        alone (:meth:`sde.StaticGaussianDriver.condition`), with the run's fresh
        normals scaled by its conditional standard deviation."""
        R, Q = self.rows, outs[0].shape[1]
        views = self._weight_views("probes", Q, R, R, R)
        mixes, paths = _pieces(ops, views[3]), [o.paths[0] for o in ops]
        news = [phi.expand(o.gram_pieces, *phi.shape) for phi, o in zip(phis, ops)]
        for l in range(1, self.L + 1):
            t = l - 1
            for h, phi in zip(outs, phis):
                self.act.phi_into(h[t], phi)
            gram, mom = self._moments(ops, t, news)
            draw = self._zeros("condition", gram, (gram.shape[0], Q, R))
            norms = torch.stack([torch.linalg.vector_norm(phi, dim=1) for phi in phis])
            var = norms.double().square_().div_(self._P[:, 0])
            w, pivots, _ = self.fwd.condition(t, gram[:, :self.capacity], var)
            draw[:, :, :self.capacity] = w
            scaled = (pivots * self.noise).to(outs[0].dtype)
            resp = self._stein(self.bwd, t, mom) if self.coupled else None
            self._weights(views, draw, gram, self.decay, resp)
            for o, path, w, h, z, s in zip(ops, paths, mixes, outs, fresh, scaled.unbind(0)):
                o.mix(l, w, path[l], path[t])
                h[l].addr_(s, z[t])

    def backward(self, hs, gLs, pivs, floors, works) -> None:
        """:meth:`Lockstep.backward` with fixed shapes: g_L of the new block into its
        buffer and the history eagerly, then the layers (:meth:`_backward_layers`),
        then the pivots into the record and the backward drivers' count moved on. The
        drift weights and noise scale are the step's forward pass's (:meth:`forward`
        filled them)."""
        for m, g, gL in zip(self.models, self.g_new, gLs):
            g[self.L] = gL
            m.hist.g[self.L].index_copy_(0, m.bwd.positions, g[self.L])
        ops = self._static_passes("backward", lambda g, m: m.hist.backward_pass(
            self.rows, works[g][0], self.coupled))
        self.replayer.run("backward", lambda: self._backward_layers(ops, hs, works))
        for d in self.bwd.drivers:
            d.advance()
        self._record(pivs, floors, slice(1, None))

    def _backward_layers(self, ops: list, hs, works) -> None:
        """The L backward layer-steps (the g_{ℓ−1} equation of
        ``nfd._simulation._simulate``), every shape fixed; each new g_{ℓ−1} goes to its
        buffer and to the history at the drivers' positions."""
        R, B = self.rows, self.bwd.drivers[0].block
        views = self._weight_views("backward", B, R, R, R)
        mixes, outs = _pieces(ops, views[3]), [o.paths[0][0] for o in ops]
        news = [_expanded(g, o.gram_pieces) for g, o in zip(self.g_new, ops)]
        for l in range(self.L, 0, -1):
            t = l - 1
            gram, mom = self._moments(ops, l, [new[l] for new in news])
            draw = self._border(self.bwd, t, gram)
            resp = self._stein(self.fwd, t, mom) if self.coupled else None
            self._weights(views, draw, gram, self.decay, resp)
            for m, o, out, w, g, h, work in zip(self.models, ops, outs, mixes, self.g_new,
                                                hs, works):
                o.mix(t, w, out)
                incr, dphi = work
                self.act.dphi_into(h[t], dphi)
                torch.addcmul(g[l], dphi, incr, out=g[t])
                m.hist.g_at[t].index_copy_(0, m.bwd.positions, g[t])
