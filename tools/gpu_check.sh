#!/usr/bin/env bash
# GPU check for the offload engine (under 2 minutes): the offload state machine against the
# native engine on CUDA, synchronous and in async mode (loads and offloads on side streams with
# events, invariant I8), plus the catalogue's offload bugs on CUDA. Without a CUDA device it
# says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(python -c 'import torch; print(torch.cuda.is_available())')" != "True" ]; then
    echo "gpu_check: no CUDA device visible to torch; skipping (nothing to check here)"
    exit 0
fi
python -c 'import torch; print("gpu_check:", torch.cuda.get_device_name(0), "torch", torch.__version__)'

export HYPOTHESIS_PROFILE=ci LCH_DEVICE=cuda
run() { timeout 60 python -m pytest -q -p no:cacheprovider "$@"; }

echo "gpu_check: offload machine, synchronous copies"
run properties/test_offload_engine.py properties/test_offload_id_reuse.py
echo "gpu_check: offload machine, async mode (side streams + events)"
LCH_OFFLOAD_ASYNC=1 run properties/test_offload_engine.py \
    "properties/test_known_bugs.py" -k "offload"
echo "gpu_check: ok"
