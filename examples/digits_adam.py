"""Adam networks on ten-class digits beside their limit (issue 34).

``examples/digits_multiclass.py`` with ``--optimizer adam`` and a peak η_c of 0.02:
ordinary-backprop depth-μP ResNets (relu, softmax cross-entropy over the ten digit
classes, batch 8) trained by exactly ``torch.optim.Adam`` in depth-μP's parameter
groups (:class:`nfd.schema.AdamRun`: U and V at lr η_c, every W_ℓ at η_c·√(T/(Ln)),
eps scaled alike), with a warm-up and a cosine decay, at several widths, beside
``nfd.simulate(optimizer=nfd.Adam())``, their n → ∞ limit with dense P×P Adam states
per layer. Every option of that script applies (``--quick``, ``--widths``,
``--particles``, ``--betas``, ``--eps``, ``--optimizer adamw --weight-decay λ``,
``--reuse``, ``--device``); the figure and json are ``digits_adam.png`` / ``.json``
in ``runs/digits_adam[_quick]``.

Usage::

    python examples/digits_adam.py --quick     # L = 8, 40 steps, widths 256, 1024
    python examples/digits_adam.py --particles 8192 --widths 256 1024 4096

Memory: the limit's states take 3·L·P² numbers (``nfd.memory_estimate``); at
L = 8 in float32, P = 8192 needs 6.7 GB and the largest P that fits in 24 GB is
about 15 000.
"""

from __future__ import annotations

import sys

from digits_multiclass import main

#: Adam's defaults here: the optimizer and a peak learning rate that trains stably
#: (at 0.02 the limit and networks of --quick reach 81% test accuracy in 40 steps)
ADAM = ["--optimizer", "adam", "--peak", "0.02"]

if __name__ == "__main__":
    main(ADAM + sys.argv[1:])  # the user's options come last and win
