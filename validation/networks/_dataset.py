"""Dataset assembly of :func:`validation.train_resnet`: the records as an
``xarray.Dataset`` in the schema of ``nfd.simulate`` (:mod:`nfd.schema`) with a
leading ``seed`` dimension, annotated with ``long_name`` and ``units``."""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from nfd.schema import MS_BLOCK, annotate, base_attrs, data_attrs, variable_dims

from ._base import ResNetEnsemble
from ._checks import TrainRun
from ._record import EigenHistory, Records
from ._tp6 import MSOptions, ms_attrs, rate_words

__all__ = ["to_dataset", "as_numpy"]


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as a float64 numpy array on the host."""
    return t.detach().to("cpu", torch.float64).numpy()


def _step_seed(t: torch.Tensor) -> np.ndarray:
    """(K, S, …) → (S, K, …)."""
    return as_numpy(t).swapaxes(0, 1)


def _layer_seed(t: torch.Tensor) -> np.ndarray:
    """(K, layer, S) → (S, K, layer)."""
    return as_numpy(t).transpose(2, 0, 1)


def to_dataset(run: TrainRun, net: ResNetEnsemble, rec: Records,
               eig: EigenHistory) -> xr.Dataset:
    """The Dataset documented in :func:`validation.train_resnet`."""
    K, B, L, T = run.K, run.B, net.L, net.T
    times = np.arange(L + 1) * (T / L)
    coords = {"seed": np.asarray(run.seeds, dtype=np.int64), "step": np.arange(K),
              "sample": np.arange(B), "time": times, "probe": np.arange(run.Q),
              "probe_step": np.asarray(run.probe_steps, dtype=np.int64),
              "eig_step": np.asarray(run.eig_steps, dtype=np.int64)}
    C, labels = run.C, run.loss.labels
    if C > 1:
        coords["output"] = np.arange(C)

    def dims(name: str) -> tuple[str, ...]:
        return ("seed",) + variable_dims(name, C, labels)

    sst = ("seed", "step", "time")
    yp = (np.zeros((0,) + run.y.shape[1:], run.y.dtype) if run.probes is None
          else run.probes[1])
    yp_dev = torch.as_tensor(yp, device=run.device,
                             dtype=torch.int64 if labels else run.dtype)
    yp_dev = yp_dev.expand(rec.probe_f.shape[:-1] if labels else rec.probe_f.shape)
    probe_loss = (run.loss.per_sample(rec.probe_f, yp_dev) if C > 1
                  else run.loss(rec.probe_f, yp_dev))
    data_vars = {
        "f": (dims("f"), _step_seed(rec.f)),
        "y": (variable_dims("y", C, labels), run.y.reshape((K, B) + run.y.shape[1:])),
        "loss": (dims("loss"), _step_seed(rec.loss)),
        "dloss": (dims("dloss"), _step_seed(rec.dloss)),
        "h2": (sst, _layer_seed(rec.h2)),
        "g2": (sst, _layer_seed(rec.g2)),
        "probe_f": (dims("probe_f"), _step_seed(rec.probe_f)),
        "probe_loss": (dims("probe_loss"), _step_seed(probe_loss)),
        "probe_y": (variable_dims("probe_y", C, labels), yp),
        "sigma_min_eig": (("seed", "eig_step", "time"), _layer_seed(eig.sigma)),
        "theta_min_eig": (("seed", "eig_step", "time"), _layer_seed(eig.theta)),
    }
    if run.loss.classifies and run.Q:
        correct = run.loss.correct(rec.probe_f, yp_dev)  # (probe steps, S, Q)
        data_vars["probe_accuracy"] = (("seed", "probe_step"),
                                       as_numpy(correct.mean(-1)).T)
    if run.collapse:
        coords["block_time"] = times[1:]
        data_vars["internal_update"] = (("seed", "step", "block_time"),
                                        _layer_seed(rec.internal))
        data_vars["residual_update"] = (("seed", "step", "block_time"),
                                        _layer_seed(rec.residual))
    ds = xr.Dataset(data_vars, coords=coords, attrs=run_attrs(run, net))
    return annotate(ds)


def run_attrs(run: TrainRun, net: ResNetEnsemble) -> dict:
    """Every parameter of the run, netCDF-safe, with the keys of ``nfd.simulate``
    where they mean the same thing (``model="network"``), the optimizer's
    :meth:`nfd.schema.SGDRun.attrs` or :meth:`nfd.schema.AdamRun.attrs` (``eta_c`` the
    constant or the schedule's peak) and torch's values at that ``eta_c``
    (:func:`_torch_values`)."""
    feature = net.regime == "feature"
    return base_attrs(
        model="network", source="validation.train_resnet", backward=net.backward,
        activation=net.act.name, loss=run.loss.name, **run.opt.attrs(), T=net.T,
        steps=net.L, depth=net.L, width=net.n, batch_size=run.B, sgd_steps=run.K,
        input_dim=net.d, **({"outputs": net.C} if net.C > 1 else {}), seeds=[int(s) for s in net.seeds],
        device=str(net.device), dtype=str(net.dtype).split(".")[-1],
        alpha="1/sqrt(n)" if feature else "1", alpha_value=net.alpha,
        **_torch_values(net), style=net.style, block=net.block, scaling=net.scaling,
        regime=net.regime, first_layer_lr=net.first_layer_lr, divergence=run.divergence,
        **net.param.attrs(), **data_attrs(run.X, None if run.probes is None else run.probes[0]),
        **(ms_attrs(MSOptions(net.block_multiplier, net.layernorm, net.lr_exponent))
           if net.block == MS_BLOCK else {}),
    )


def _torch_values(net: ResNetEnsemble) -> dict:
    """torch's hyper-parameters at the attribute ``eta_c`` (the attrs' η_c).

    SGD: ``optimizer="sgd"``, ``learning_rate`` (its formula) and
    ``learning_rate_value`` = η_c·γ₀²/α², torch's lr of every parameter but
    W_{ℓ,1}, whose lr is ``learning_rate_first_layer_value`` (×√L under
    ``first_layer_lr="depth-aware"``), ``weight_decay_value`` = λα²/γ₀²; under
    ``scaling="standard"`` these are the standard network's one lr η_c and decay λ,
    and ``learning_rate_stored_U_value``, ``weight_decay_stored_U_value`` etc. (U,
    each weight family, V) those of the N(0, 1) weights kept (η_c·fan-in,
    λ/fan-in). Adam: per param group of
    :attr:`ResNetEnsemble.torch_optimizer`, ``learning_rate_value``, ``eps_value``
    and ``weight_decay_value`` of W (η_c·√(T/(Ln)), ε·√(T/L)/n^{3/2}, λ/√(T/(Ln)))
    and the same keys with ``_U`` / ``_V`` before ``_value`` for U and V (η_c, ε/n,
    λ); ``learning_rate`` is W's formula.
    """
    if net.torch_optimizer is None:
        feature = net.regime == "feature"
        lr = ("eta_c*n" if feature else "eta_c") if net.gamma0 == 1 else \
            ("eta_c*gamma0^2*n" if feature else "eta_c*gamma0^2")
        out = {"optimizer": "sgd",
               "learning_rate": rate_words(net.param, "sgd", lr, "depth-mup", net.lr_exponent),
               "learning_rate_value": net.eta,
               "learning_rate_first_layer_value": net.eta * net.lr_mult_first,
               "weight_decay_value": net.torch_weight_decay}
        if net.param.branch_exponent != 0.5 or net.lr_exponent is not None:  # W's group
            out["learning_rate_hidden_value"] = net.eta * net.lr_mult("W")
            out["weight_decay_hidden_value"] = net.torch_weight_decay / net.lr_mult("W")
        if net.scaling == "standard":  # one torch lr on the N(0, 1/fan-in) weights
            out["learning_rate"] = "eta_c (torch's lr of the standard network)"
            for k in ("U", *net.families, "V"):  # the N(0, 1) weights kept here
                out[f"learning_rate_stored_{k}_value"] = net.eta * net.lr_mult(k)
                out[f"weight_decay_stored_{k}_value"] = net.weight_decay / net.lr_mult(k)
        return out
    out = {"learning_rate": net.param.adam_hidden_words(net.hidden_lr) if net.lr_exponent is None
           else rate_words(net.param, "adam", "", net.hidden_lr, net.lr_exponent).rpartition(
               "W: ")[2]}
    for group in net.torch_optimizer.param_groups:
        tag = "" if group["name"] == "W" else "_" + group["name"]
        out[f"learning_rate{tag}_value"] = net.eta_c * group["lr_mult"]
        out[f"eps{tag}_value"] = group["eps"]
        out[f"weight_decay{tag}_value"] = group["weight_decay"]
    return out
