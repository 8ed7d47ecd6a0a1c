"""The simulation of the NFD limit of training, :func:`nfd.simulate`: the
forward–backward particle system of Definition 1 (paper 002) and its coupled
counterpart (paper 000), with its argument checks, particle state, SGD step, history
products, error replicas, Dataset assembly and memory estimate; and the exact P → ∞ oracle of
the identity activation, :func:`nfd.linear_limit`.

The rest of ``nfd`` reaches it through the names below only.
"""

from ._coupling import coarsen_innovations
from ._memory import memory_estimate
from ._oracle import linear_limit
from ._reference import reference_responses
from ._replay import graph_replay
from ._simulate import simulate

__all__ = ["simulate", "linear_limit", "memory_estimate", "coarsen_innovations", "graph_replay",
           "reference_responses"]
