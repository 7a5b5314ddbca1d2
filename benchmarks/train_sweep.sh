#!/usr/bin/env bash
# Fine-tune probe under torchrun with a few workload shapes, to choose the GPU profile by measurement
# (utilisation >= 80% on every GPU, target loss within the steps, wall <= 60 s). Not a test.
#
#   bash benchmarks/train_sweep.sh            # results under $OUT (or reports/train-sweep)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/train-sweep}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# srun starts ranks with torch's default thread count; torchrun would set OMP_NUM_THREADS=1.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
all=$(nproc) # the probe's GPU default is min(4, cores / ranks); "-tall" runs show torch's default instead
python3 - "$out" <<'PY'
import json, sys
base = json.load(open("fixtures/training/qwen2-small.json"))
wide = dict(base, hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=4)
json.dump(wide, open(f"{sys.argv[1]}/qwen2-wide.json", "w"))
PY
ngpu=$(nvidia-smi -L | wc -l)
run() { # name nproc args...
  local name=$1 n=$2 t0
  shift 2
  t0=$(date +%s.%N)
  python3 -m torch.distributed.run --standalone --nproc-per-node "$n" -m gpuaccept.probes.finetune \
    --out "$out/$name" "$@" >"$out/$name.out" 2>"$out/$name.err"
  echo "$name rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$t0,1))")" | tee -a "$out/runs.txt"
}
IFS=';' read -r -a specs <<<"${GPUACCEPT_SWEEP:-ddp1-b512|1|ddp|;ddp2-b512-tall|2|ddp|--threads $all;ddp2-b512|2|ddp|;ddp2-b1024|2|ddp|--batch-size 1024;ddp2-wide|2|ddp|--model-config $out/qwen2-wide.json;fsdp2-b1024|2|fsdp|--batch-size 1024;fsdp2-wide|2|fsdp|--model-config $out/qwen2-wide.json}"
for spec in "${specs[@]}"; do
  IFS='|' read -r name n strategy extra <<<"$spec"
  ((n <= ngpu)) || continue
  # shellcheck disable=SC2086
  run "$name" "$n" --strategy "$strategy" --steps "${SWEEP_STEPS:-60}" --ckpt-every "${SWEEP_CKPT:-30}" $extra
done
python3 benchmarks/train_sweep_table.py "$out" | tee "$out/table.txt"
