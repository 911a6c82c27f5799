#!/usr/bin/env bash
# The GPU figures of bench/README.md in one run on a lent GPU machine (the session's `device` tool):
# a random InternLM2-chat-1.8B in bfloat16, the strategy replay of two episodes (decode tokens/s of one
# agent against the bandwidth bound), then the episodes as 32 agents one after another and at once.
# That machine has torch and transformers but not json5: put its wheel in .whl first (bench/README.md), then
#   run(command="bash bench/gpu.sh", carry=[".whl"], timeout_s=570)
# Figures land in $OUT (gpu.json, gpu.log). About 5 minutes were planned for it; it has not run yet.
set -euo pipefail
OUT=${OUT:-/tmp/tinyagent-gpu}
mkdir -p "$OUT"
if ! python3 -c "import json5" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.log"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$OUT/gpu.log"
timeout 540 python3 bench/episode_cost.py --device cuda --dtype bfloat16 --random-internlm2-1_8b --quick \
    --concurrency 32 --json "$OUT/gpu.json" 2>&1 | tee -a "$OUT/gpu.log"
