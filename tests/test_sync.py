"""No host synchronisation inside the per-layer loops (issue 25): on a GPU every
``.item()``, ``float(tensor)``, ``.cpu()``... in a layer loop stalls the device once
per layer.

Static part (runs everywhere): :func:`test_no_host_sync_in_layer_loops` parses every
module of ``sde``, ``nfd`` and ``validation`` and checks

* every ``for`` loop over layers in the packages that compute per layer
  (:data:`LOOP_SCOPE`: ``sde``, ``nfd``, ``validation/networks``): its iterable
  names one of :data:`LAYER_WORDS` (``range(self.L)``, ``range(steps + 1)``,
  ``grads.hidden.items()``...; the SGD step loop of ``nfd.simulate``, ``for k in
  steps``, matches too, and its body has none either: the step's one
  synchronisation is the guard's, below), and
* the whole body of every function a layer-step calls (:data:`PER_LAYER`, as
  ``(module, qualified name)``; a name that no longer exists fails the test, so a
  rename cannot silently drop a check),

for the calls that copy a tensor to the host: ``.item()``, ``.cpu()``, ``.tolist()``,
``.numpy()``, ``.nonzero()``, the ``torch.linalg`` functions whose documentation
says they synchronise a CUDA device with the CPU (:data:`SYNC_LINALG`: ``eigh``,
``cholesky``, ``solve``...; their ``_ex`` variants do not), ``float(...)``,
``int(...)``, ``bool(...)`` (of
anything but a literal or ``len(...)``: a static test cannot tell a tensor from a
Python number, so host numbers are converted outside the loops), and ``if`` /
``while`` / ``assert`` tests that call ``.any()`` or ``.all()`` (an implicit
``bool(tensor)``). Code that runs only to build an error message (the body of a
``raise``) is not checked: it runs once, when the run stops. :data:`ALLOWED` lists
the conversions of values that are Python numbers, each with its reason. The studies
and fits of ``validation`` loop over grids of depths on numpy results, not over
layers, and are left out.

CUDA part (skipped without a GPU): :func:`test_sync_count_per_sgd_step_on_cuda` runs
a small ``nfd.simulate`` in both backward modes and ``validation.train_resnet`` under
``torch.cuda.set_sync_debug_mode("warn")`` and counts the warnings: at most
:data:`SYNCS_PER_STEP` per SGD step (the divergence guard's ``bool``,
``nfd.schema.DivergenceGuard``) plus a fixed number per run (setup, the probe
evaluations' own guard, the end-of-run reads).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import nfd
import validation
from conftest import sphere

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sde", "nfd", "validation")

#: Where the generic loop rule applies (path prefixes).
LOOP_SCOPE = ("sde/", "nfd/", "validation/networks/")
#: ``(path, code)`` of the calls the rule would flag that are allowed, with the reason.
ALLOWED = {
    # t is the Euler time, a float: the layer index of the stored forward path
    ("nfd/_init/_sde.py", "int(round(t / self.tau))"),
    # KNOWN SYNC, kept: the eigen-solver of sde.psd_factor checks its result on the
    # host, once per Euler step of the at-init SDEs with several inputs
    # (forward_sde / nngp_kernel by particles with m ≥ 2 inputs, backward_sde);
    # one input takes the scalar path, which has none. Replacing it would change
    # the at-init numbers (options never change results), so it is documented in
    # sde.psd_factor instead.
    ("sde/_linalg.py", "torch.linalg.eigh(sym)"),
    # a host number (the schedule is a numpy array), not a tensor
    ("nfd/_optim/_optimizers.py", "float(opt.eta_c[k])"),
}
#: A ``for`` loop whose iterable mentions one of these names (a variable or an
#: attribute) runs over layers, depth or Euler steps.
LAYER_WORDS = {"L", "layers", "depth", "steps", "times", "per_layer", "hidden"}

#: Functions a layer-step calls, and the passes that hold the layer loops, checked
#: whole: ``(module path, qualified name)``.
PER_LAYER = [
    # nfd.simulate: the passes of a run and its replicas and what one layer-step calls
    ("nfd/_simulation/_lockstep.py", "Lockstep.forward"),
    ("nfd/_simulation/_lockstep.py", "Lockstep.forward_probes"),
    ("nfd/_simulation/_lockstep.py", "Lockstep.backward"),
    ("nfd/_simulation/_lockstep.py", "Lockstep._weights"),
    ("nfd/_simulation/_lockstep.py", "Lockstep._noise"),
    ("nfd/_simulation/_lockstep.py", "Lockstep._weight_views"),
    ("nfd/_simulation/_lockstep.py", "Lockstep._moments"),
    ("nfd/_simulation/_lockstep.py", "Lockstep._decay"),
    ("nfd/_simulation/_lockstep.py", "_record_pivots"),
    ("nfd/_simulation/_lockstep.py", "_pieces"),
    ("nfd/_simulation/_lockstep.py", "_expanded"),
    ("nfd/_simulation/_model.py", "moments"),
    ("nfd/_simulation/_model.py", "Model.embed"),
    # ... and Adam's dense states (optimizer="adam"), with the factored reference
    ("nfd/_simulation/_adam.py", "DenseAdam.embed"),
    ("nfd/_simulation/_adam.py", "DenseAdam.readout"),
    ("nfd/_simulation/_adam.py", "DenseAdam.forward"),
    ("nfd/_simulation/_adam.py", "DenseAdam.backward"),
    ("nfd/_simulation/_adam.py", "DenseAdam.update_layer"),
    ("nfd/_simulation/_adam.py", "DenseAdam.update_io"),
    ("nfd/_simulation/_adam.py", "SignDescent.forward"),
    ("nfd/_simulation/_adam.py", "SignDescent.backward"),
    ("nfd/_simulation/_adam.py", "SignDescent.update_layer"),
    ("nfd/_optim/_optimizers.py", "adam_step_"),
    # ... and of TwoLayerModel (block="two-layer")
    ("nfd/_simulation/_twolayer.py", "TwoLayerModel.forward"),
    ("nfd/_simulation/_twolayer.py", "TwoLayerModel.forward_probes"),
    ("nfd/_simulation/_twolayer.py", "TwoLayerModel.backward"),
    ("nfd/_simulation/_twolayer.py", "TwoLayerModel._layer"),
    ("nfd/_simulation/_twolayer.py", "RowsModel._source"),
    ("nfd/_simulation/_twolayer.py", "RowsModel._respond"),
    ("nfd/_simulation/_twolayer.py", "RowsModel._half"),
    ("nfd/_simulation/_twolayer.py", "_means"),
    ("nfd/_simulation/_twolayer.py", "_rms"),
    # ... and of MSModel (block="post-nonlin-ms")
    ("nfd/_simulation/_msblock.py", "MSModel.forward"),
    ("nfd/_simulation/_msblock.py", "MSModel.forward_probes"),
    ("nfd/_simulation/_msblock.py", "MSModel.backward"),
    ("nfd/_simulation/_msblock.py", "MSModel._layer"),
    ("nfd/_model/_norms.py", "mean_subtract"),
    ("nfd/_model/_norms.py", "layer_norm"),
    ("nfd/_simulation/_streams.py", "Pass.products"),
    ("nfd/_simulation/_streams.py", "Pass.mix"),
    ("nfd/_model/_activations.py", "Activation.phi_into"),
    ("nfd/_model/_activations.py", "Activation.dphi_into"),
    ("sde/_drivers.py", "GrowingGaussianDriver.border"),
    ("sde/_drivers.py", "GrowingGaussianDriver._open"),
    ("sde/_drivers.py", "GrowingGaussianDriver._commit"),
    ("sde/_group.py", "DriverGroup.border"),
    ("nfd/_simulation/_replay.py", "StaticLockstep._border"),
    ("nfd/_simulation/_replay.py", "StaticLockstep._stein"),
    ("nfd/_simulation/_replay.py", "StaticLockstep._noise"),
    ("nfd/_simulation/_replay.py", "StaticLockstep._zeros"),
    ("sde/_static.py", "StaticGaussianDriver.border"),
    ("sde/_static.py", "StaticGaussianDriver._write"),
    ("sde/_static.py", "StaticGaussianDriver.advance"),
    ("sde/_static.py", "StaticGaussianDriver.condition"),
    ("sde/_static.py", "StaticGaussianDriver.stein_from_moment"),
    ("sde/_static.py", "static_borders"),
    ("sde/_static.py", "StaticDriverGroup.border"),
    ("sde/_static.py", "StaticDriverGroup.condition"),
    ("sde/_static.py", "StaticDriverGroup.stein_from_moment"),
    ("sde/_group.py", "DriverGroup.stein_from_moment"),
    ("sde/_group.py", "DriverGroup.condition"),
    ("sde/_layout.py", "grouped"),
    ("sde/_drivers.py", "GrowingGaussianDriver._flush"),
    ("sde/_drivers.py", "GrowingGaussianDriver._draw"),
    ("sde/_drivers.py", "GrowingGaussianDriver._committed"),
    ("sde/_drivers.py", "stein_keep"),
    ("sde/_drivers.py", "GrowingGaussianDriver.condition"),
    ("sde/_drivers.py", "GrowingGaussianDriver.stein_from_moment"),
    ("sde/_border.py", "border_column"),
    ("sde/_border.py", "border_columns"),
    ("sde/_border.py", "_pivots"),
    ("sde/_border.py", "_column_algebra"),
    ("sde/_border.py", "_fresh"),
    ("sde/_border.py", "border_blocks"),
    ("sde/_border.py", "_block_tail"),
    ("sde/_border.py", "_block_algebra"),
    ("sde/_border.py", "_fresh_algebra"),
    ("sde/_border.py", "_compiled"),
    ("sde/_border.py", "condition_groups"),
    ("sde/_border.py", "_condition_tail"),
    ("sde/_border.py", "_regularise"),
    ("sde/_border.py", "_floor"),
    ("sde/_border.py", "border_block"),
    ("sde/_border.py", "_block_factor"),
    ("sde/_border.py", "truncated_rows"),
    ("sde/_border.py", "condition_each"),
    ("sde/_border.py", "skipped"),
    ("sde/_linalg.py", "psd_factor"),
    # the at-init engine: one Euler step per layer (the loop of sde.euler_maruyama
    # itself is found by the generic rule)
    ("nfd/_init/_sde.py", "ForwardSDE.diffusion"),
    ("nfd/_init/_sde.py", "ForwardSDE.diffusion_prod"),
    ("nfd/_init/_sde.py", "_BackwardSDE.diffusion_prod"),
    ("nfd/_init/_sde.py", "_moments"),
    # the finite networks: forward, backward and update of one layer
    ("validation/networks/_base.py", "ResNetEnsemble.forward_pass"),
    ("validation/networks/_base.py", "ResNetEnsemble._forward_only"),
    ("validation/networks/_base.py", "ResNetEnsemble.backward_pass"),
    ("validation/networks/_base.py", "ResNetEnsemble.apply_update"),
    ("validation/networks/_base.py", "ResNetEnsemble._update"),
    ("validation/networks/_base.py", "ResNetEnsemble._adam_update"),
    ("validation/networks/_preact.py", "PreActResNet._block"),
    ("validation/networks/_preact.py", "PreActResNet._block_backward"),
    ("validation/networks/_postact.py", "PostActResNet._block"),
    ("validation/networks/_postact.py", "PostActResNet._block_backward"),
    ("validation/networks/_twolayer.py", "TwoLayerResNet._block"),
    ("validation/networks/_twolayer.py", "TwoLayerResNet._record_collapse"),
    ("validation/networks/_twolayer.py", "TwoLayerResNet._block_backward"),
    ("validation/networks/_step.py", "RankUpdate.apply_to"),
    ("validation/networks/_step.py", "RankUpdate.accumulate"),
    ("validation/networks/_step.py", "mean_square"),
]

#: Methods whose call copies a tensor to the host (and waits for the device).
SYNC_METHODS = {"item", "cpu", "tolist", "numpy", "nonzero"}
#: Built-ins that read a tensor's value on the host.
SYNC_BUILTINS = {"float", "int", "bool"}
#: ``torch.linalg`` functions documented to synchronise a CUDA device with the CPU
#: (read from torch's own docstrings, so a new torch keeps the list current).
SYNC_LINALG = {name for name in dir(torch.linalg) if "synchronizes that device with the CPU"
               in (getattr(torch.linalg, name).__doc__ or "")}


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _names(node: ast.AST) -> set[str]:
    """Every variable and attribute name in an expression."""
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _host_value(arg: ast.AST) -> bool:
    """An argument of float/int/bool that is a host value whatever the types: a
    literal, or ``len(...)``."""
    if isinstance(arg, ast.Constant):
        return True
    return (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name)
            and arg.func.id == "len")


def _calls_any_all(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr in ("any", "all") for n in ast.walk(test))


def _syncs(path: str, body: list[ast.stmt]) -> list[tuple[int, str]]:
    """(line, text) of every host synchronisation in the statements ``body`` of the
    module ``path``, skipping what only builds the message of a ``raise`` and the
    :data:`ALLOWED` conversions."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Raise):
            return
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and (
                    f.attr in SYNC_METHODS
                    or (f.attr in SYNC_LINALG and ast.unparse(f.value).endswith("linalg")
                        and (path, ast.unparse(node)) not in ALLOWED)):
                found.append((node.lineno, ast.unparse(node)))
            elif (isinstance(f, ast.Name) and f.id in SYNC_BUILTINS and node.args
                  and not _host_value(node.args[0])
                  and (path, ast.unparse(node)) not in ALLOWED):
                found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, (ast.If, ast.While, ast.Assert, ast.IfExp)) and \
                _calls_any_all(node.test):
            found.append((node.lineno, f"implicit bool: {ast.unparse(node.test)}"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    for stmt in body:
        visit(stmt)
    return found


def layer_loops(tree: ast.AST) -> list[ast.For]:
    """The ``for`` loops of a module whose iterable names one of :data:`LAYER_WORDS`."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.For)
            and _names(n.iter) & LAYER_WORDS]


def _function(tree: ast.Module, qualname: str) -> ast.FunctionDef | None:
    scope: list[ast.stmt] = tree.body
    node = None
    for part in qualname.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                     and n.name == part), None)
        if node is None:
            return None
        scope = node.body
    return node


def violations(root: Path = ROOT) -> list[str]:
    """Every host synchronisation in a layer loop or a :data:`PER_LAYER` function, as
    ``path:line: code (where)``, once per place; a :data:`PER_LAYER` entry that is
    not found is one too."""
    out = []
    trees = {p.relative_to(root).as_posix(): ast.parse(p.read_text())
             for p in sorted(q for pkg in PACKAGES for q in (root / pkg).rglob("*.py"))}
    for path, tree in trees.items():
        for loop in layer_loops(tree) if path.startswith(LOOP_SCOPE) else ():
            out += [f"{path}:{line}: {code} (in the layer loop at line {loop.lineno})"
                    for line, code in _syncs(path, loop.body)]
    for path, qualname in PER_LAYER:
        fn = _function(trees[path], qualname) if path in trees else None
        if fn is None:
            out.append(f"{path}: {qualname} not found (PER_LAYER names a function that "
                       "moved or was renamed)")
            continue
        out += [f"{path}:{line}: {code} (in {qualname}, called per layer)"
                for line, code in _syncs(path, fn.body)]
    first = {}  # one entry per path:line: code, whichever rule found it
    for item in out:
        first.setdefault(item.split(" (in ")[0], item)
    return sorted(first.values())


def test_no_host_sync_in_layer_loops():
    found = violations()
    assert not found, "host synchronisation in a per-layer loop:\n" + "\n".join(found)


def test_the_linalg_list_is_read_from_torch():
    assert {"eigh", "eigvalsh", "cholesky", "solve", "inv"} <= SYNC_LINALG
    assert not {"cholesky_ex", "solve_ex", "qr", "vector_norm"} & SYNC_LINALG


def test_the_rule_sees_the_loops_it_is_about():
    # the generic rule finds the layer loops of simulate and of the networks (a loop
    # it stopped recognising would pass unchecked)
    trees = {p.relative_to(ROOT).as_posix(): ast.parse(p.read_text()) for p in _modules()}
    count = {path: len(layer_loops(tree)) for path, tree in trees.items()}
    assert count["nfd/_simulation/_lockstep.py"] >= 3  # forward, probes, backward
    assert count["validation/networks/_base.py"] >= 4  # forward, forward-only, backward, update
    assert count["sde/_euler.py"] >= 1


def test_the_rule_fails_on_a_sync(tmp_path):
    # the checker's own power: a copy of nfd/_simulation/_lockstep.py with an .item() in
    # the forward layer loop, and one with float() of a tensor in a PER_LAYER function
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            dest = tmp_path / p.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(p.read_text())
    model = tmp_path / "nfd/_simulation/_lockstep.py"
    text = model.read_text()
    anchor = "            pivots.append(min_eig)\n"
    assert text.count(anchor) == 2
    model.write_text(text.replace(anchor, anchor + "            min_eig.item()\n", 1))
    border = tmp_path / "sde/_border.py"
    anchor = "    G, k = cols.shape[0], cols.shape[1] - 1\n"  # in border_columns
    border.write_text(border.read_text().replace(anchor, anchor + "    float(coef[0])\n"))
    found = violations(tmp_path)
    assert len(found) == 2, found
    assert "min_eig.item()" in found[0] and "float(coef[0])" in found[1]


# ----------------------------------------------------------------------- CUDA

#: Host synchronisations per SGD step, documented in nfd.schema.DivergenceGuard: one,
#: the guard's ``bool`` of its check (nfd.simulate and validation.train_resnet alike).
SYNCS_PER_STEP = 1
#: Synchronisations per run that do not grow with the SGD steps: setup (inputs,
#: targets and the first zero-filled buffers), each probe evaluation's guard, the
#: end-of-run floor warning and the copy of the records to numpy (measured on no GPU
#: yet: a generous bound; the test is about the per-step count).
SYNCS_PER_RUN = 64


def _count_syncs(run) -> int:
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["coupled", "decoupled", "coupled momentum", "network",
                                  "at-init", "coupled adam", "network adam"])
def test_sync_count_per_sgd_step_on_cuda(kind):
    # Two runs of K and 2K steps (no probes, no eigenvalues: eigvalsh waits for the
    # device): the extra K steps may add at most SYNCS_PER_STEP synchronisations each,
    # so a sync inside the layer loop (L = 4 per pass) is caught by the difference
    # whatever the fixed cost per run; the total stays below SYNCS_PER_STEP·K +
    # SYNCS_PER_RUN. "coupled momentum" sends the optimizer's coefficients to the
    # device every step (nfd._simulation._step.set_optimizer). "at-init": the at-init
    # engine (nfd.forward_sde, one input) has no synchronisation per Euler step at all.
    # "adam": Adam's dense states in the limit and torch.optim.Adam in the networks
    # (issue 34; not yet run on a GPU when written).
    X = sphere(np.random.default_rng(0), 16, 8)
    y = np.tanh(X[:, 0])

    def run(K):
        if kind == "at-init":
            return lambda: nfd.forward_sde(X[:1], depth=4 * K, particles=256, device="cuda")
        first, *options = kind.split()
        opt = ({"optimizer": nfd.Adam()} if options == ["adam"]
               else {"optimizer": nfd.SGD(momentum=0.5)} if options else {})
        if first == "network":
            return lambda: validation.train_resnet(
                X[:K], y[:K], width=64, depth=4, eta_c=0.02 if opt else 0.2, seeds=2,
                device="cuda", progress=False, **opt)
        return lambda: nfd.simulate(X[:K], y[:K], eta_c=0.02 if "optimizer" in opt else 0.2,
                                    depth=4, record=nfd.Record(eig_steps=[]), particles=256, backward=first, device="cuda",
                                    progress=False, error_replicas=0, **opt)

    short, long = _count_syncs(run(4)), _count_syncs(run(8))
    per_step = 0 if kind == "at-init" else SYNCS_PER_STEP
    assert long - short <= per_step * 4, (short, long)
    assert long <= SYNCS_PER_STEP * 8 + SYNCS_PER_RUN, (short, long)
