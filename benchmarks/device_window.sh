#!/usr/bin/env bash
# Issue 49's device window on a lent GPU, in one command that fits 10 minutes:
# the device tests, per-layer-step times, peak memory against nfd.memory_estimate,
# host synchronisations per SGD step, the error replicas' cost and the time to
# accuracy against train_resnet (benchmarks/device_report.py, its default sections),
# every figure written to JSON after each section so that a window cut short still
# reports.
#
# Run from the repository root, with $OUT the folder whose files come back:
#
#   bash benchmarks/device_window.sh            # OUT defaults to ./device-out
#
# The GPU image has torch, numpy, scipy, xarray, matplotlib and pytest but not
# torchsde (needed only by the engine section and the torchsde tests): carry its
# wheels in .whl/ (ignored by git; see docs/guide/gpu.md for the download command)
# and name .whl in the device tool's carry. nfd itself runs from the checkout
# (PYTHONPATH), so nothing is built there.
set -uo pipefail
OUT="${OUT:-device-out}"
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
# the machine, for the log (the report records nfd as "checkout": nothing is installed)
python3 - <<'EOF' 2>&1 | tee "$OUT/machine.txt"
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))
EOF
timeout 540 python3 benchmarks/device_report.py --device cuda --out "$OUT/report.json" \
    ${SECTIONS:+--sections "$SECTIONS"} 2>&1 | tee "$OUT/report.log"
