#!/usr/bin/env bash
# The GPU checks issue 13 names, as one run on a lent GPU machine (device tool): the dlsched.torch wrapper's
# overhead against plain DDP with NCCL. Wheels the machine lacks travel in .whl (pydantic and its needs).
# Run from the repo root; output also goes to $OUT/gpu_checks.log when OUT is set.
set -u
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, torch.distributed as d; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'gpus', torch.cuda.device_count(), 'nccl', d.is_nccl_available() and torch.cuda.nccl.version())"
  gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
  # small steps (launch-bound: the wrapper's Python weighs most), then steps of ~20 ms of GPU work
  DEVICE=cuda WORKERS=$gpus ROUNDS=${ROUNDS:-3} STEPS=300 WIDTH=1024 BATCH=128 python3 bench/torch_overhead.py
  DEVICE=cuda WORKERS=$gpus ROUNDS=${ROUNDS:-3} STEPS=200 WIDTH=8192 BATCH=2048 python3 bench/torch_overhead.py
} 2>&1 | tee ${OUT:+$OUT/gpu_checks.log}
