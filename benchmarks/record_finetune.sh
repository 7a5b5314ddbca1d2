#!/usr/bin/env bash
# Records the fine-tune's scale profile on one GPU, as the suite launches it on a one-GPU node, for
# fixtures/training/ (the contract's recording: gpuaccept/contracts/finetune.py). No Slurm: one rank, the repository
# on PYTHONPATH. About 2 minutes on an H100/H200 (the pre-contract H100 recording's process wall was 123 s).
#
#   bash benchmarks/record_finetune.sh OUTDIR
#
# Writes OUTDIR/finetune-scale-<gpu>.out (the probe's stdout: its result line), .err, and a one-line summary of
# the GPU it ran on; copy the .out to fixtures/training/ (named by the GPU: e.g. finetune-scale-h200.out) and add it
# to RECORDED in tests/selftest/test_probe_contracts.py.
set -euo pipefail
out=${1:?usage: record_finetune.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29517}
export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | tr " " "-" | tr '[:upper:]' '[:lower:]')
name=finetune-scale-${gpu}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 >"$out/$name.gpu.txt"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} timeout 300 python3 -m gpuaccept.probes.finetune --strategy solo \
  --profile scale --out "$work/run" >"$out/$name.out" 2>"$out/$name.err"
python3 - "$out/$name.out" <<'PY'
import sys
from pathlib import Path
from gpuaccept.dispatch.result import parse_records
from gpuaccept.probes.specs import FINETUNE
(record,) = parse_records("finetune", Path(sys.argv[1]).read_text(), 1, ())
payload = FINETUNE.read(FINETUNE.validate(record)).root  # PayloadError names the field when it is not the contract
print(sys.argv[1], payload["outcome"], payload.get("tokens_per_s"), payload.get("process_wall_s"))
PY
