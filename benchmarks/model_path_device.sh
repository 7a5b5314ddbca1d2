#!/usr/bin/env bash
# `--model-path` through the suite on a GPU host, as a user runs it: each checkpoint shape is made on the
# GPU without a download (benchmarks/make_checkpoint.py: seeded random init, bf16 safetensors, the fixture
# tokenizer), then `pytest -m "acceptance and training" --model-path DIR` runs through a loopback Slurm node
# holding every GPU (benchmarks/device_suite.sh, the site file for the host's GPUs). Logs, run records and the
# checkpoints' sizes land in $OUT (or reports/device); the checkpoint is deleted after its run.
#
#   bash benchmarks/model_path_device.sh            # Qwen2-1.5B's shape (1.31 B), then Qwen2-7B's (6.53 B)
#   bash benchmarks/model_path_device.sh 7b         # one shape
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/device}
mkdir -p "$out"
shapes=("$@")
((${#shapes[@]})) || shapes=(1.5b 7b)
for shape in "${shapes[@]}"; do
  ckpt=${TMPDIR:-/tmp}/gpuaccept-ckpt-$shape
  python3 benchmarks/make_checkpoint.py --shape "$shape" --out "$ckpt" | tee -a "$out/checkpoints.txt"
  GPUACCEPT_MARK="acceptance and training" GPUACCEPT_RUN_NAME="model-path-$shape-run" GPUACCEPT_MULTINODE=0 \
    bash benchmarks/device_suite.sh 1 --model-path "$ckpt"
  rm -rf "$ckpt"
done
