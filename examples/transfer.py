"""Does the best learning rate of a shallow ResNet hold for a deep one? A one-line sweep on
real data: digits 3 vs 8, depth-μP networks at two depths beside the infinite-width
limit of ordinary backprop, over a grid of η_c (needs the ``data`` extra:
scikit-learn).

Each grid is one call of ``validation.sweep_grid``; finished points are kept in
./transfer_jobs, so an interrupted run resumes where it stopped. A point that
diverges is NaN in the result (``diverged`` says where), not a crash. Prints the
running-mean train loss (last 16 of 64 SGD steps) per η_c and the grid's best η_c
per depth. About 10 s on one core. The full study with intervals and verdicts:
``nfd-validate transfer --out DIR`` (``--quick`` for a small version).

Usage::

    python examples/transfer.py
"""

import numpy as np
import torch

from validation import load_digits, sweep_grid

torch.set_num_threads(1)  # results are bit-reproducible at a fixed thread count

K = 64  # online SGD steps, one image each
# rows on the sphere |x|² = d, pixels standardised with the K training images only
X, y = load_digits((3, 8), n_samples=K + 64, fit_samples=K)
train, probes = (X[:K], y[:K]), (X[K:], y[K:])
etas = [0.025, 0.05, 0.1, 0.2, 0.4, 0.8]

nets = sweep_grid(*train, kind="network", probes=probes, store="transfer_jobs",
                  grid={"depth": [4, 16], "eta_c": etas},
                  fixed={"width": 64, "seeds": [0, 1, 2, 3], "probe_steps": [K]},
                  variables=["loss", "probe_loss"])
limit = sweep_grid(*train, kind="simulate", probes=probes, store="transfer_jobs",
                   grid={"depth": [16], "eta_c": etas},
                   fixed={"particles": 2048, "backward": "coupled", "probe_steps": [K]},
                   variables=["loss", "probe_loss"])

window = slice(K - K // 4, K)
net_loss = nets["loss"].isel(step=window).mean(("step", "sample", "seed"))
lim_loss = limit["loss"].isel(step=window).mean(("step", "sample")).sel(depth=16)
print("eta_c   " + "  ".join(f"{e:7.3f}" for e in etas))
for L in (4, 16):
    row = net_loss.sel(depth=L).values
    print(f"L = {L:<3d} " + "  ".join(f"{v:7.4f}" for v in row)
          + f"   best eta_c {etas[int(np.nanargmin(row))]}")
print("limit   " + "  ".join(f"{v:7.4f}" for v in lim_loss.values)
      + f"   best eta_c {etas[int(np.nanargmin(lim_loss.values))]}  (n = inf, L = 16)")
print("diverged (network, L = 4, 16):", nets["diverged"].values.tolist())
