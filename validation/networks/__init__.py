"""The finite depth-μP ResNets of paper 002 as batched seed ensembles, trained by online
SGD (exactly ``torch.optim.SGD``'s update: schedules, momentum, weight decay, γ₀)
or ``torch.optim.Adam`` / ``AdamW`` (the depth-μP groups of issue 34)
with a hand-written backward pass: one module per architecture (pre-activation
eq. 1, post-activation eq. 9, two-layer blocks eq. 6), their branch scalings, the
trainer :func:`validation.train_resnet` and its checks, records and Dataset
assembly, and the memory estimate consulted before a run allocates.

This package stands alone: it uses ``nfd``, nothing of the rest of ``validation``. The studies (:mod:`validation.studies`) and the sweeps use it through
the names below.
"""

from ._memory import network_memory_estimate
from ._models import ResNetEnsemble
from ._train import init_increments, train_resnet

__all__ = ["ResNetEnsemble", "train_resnet", "init_increments", "network_memory_estimate"]
