#!/usr/bin/env bash
# The real-scale fine-tune on one GPU: the suite's own probe as the suite launches it, then our step
# beside transformers.Trainer + peft (benchmarks/train_scale_bench.py). Logs and JSON land in $OUT.
#
#   bash benchmarks/train_scale_device.sh probe      # the scale profile, solo, as test_training runs it
#   bash benchmarks/train_scale_device.sh bench      # tiny / 1B / 7B: ours (bf16, fp32 adapters) vs Trainer
#   bash benchmarks/train_scale_device.sh det        # the probe twice: bitwise identical losses and sha?
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/device}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case $name in
  *H100*) peak=989 ;;  # H100 SXM datasheet: 989 TFLOPS dense BF16
  *H200*) peak=989 ;;  # H200 datasheet: 989 TFLOPS dense BF16 (the H100's compute, more memory)
  *) peak=${GPUACCEPT_PEAK_TFLOPS:?unknown GPU $name: set GPUACCEPT_PEAK_TFLOPS} ;;
esac
what=${1:-probe}
shift || true
sampler() { nvidia-smi --query-gpu=utilization.gpu,power.draw,memory.used --format=csv,noheader -lms 500 >"$out/$1.smi" & }
case $what in
  probe | det)
    for run in ${what/det/a b}; do
      [[ $what == probe ]] && run=probe
      sampler "$run"; smi=$!
      t0=$(date +%s.%N)
      timeout "${GPUACCEPT_PROBE_TIMEOUT:-300}" python3 -m gpuaccept.probes.finetune --strategy solo --profile scale \
        --out "/tmp/scale-$run" "$@" >"$out/$run.out" 2>"$out/$run.err"
      echo "$run: exit $? wall $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"
      kill $smi
      python3 benchmarks/train_scale_summary.py "$out/$run.out" | tee "$out/$run.txt"
      tail -n 3 "$out/$run.err"
    done
    ;;
  bench)
    timeout "${GPUACCEPT_BENCH_TIMEOUT:-400}" python3 benchmarks/train_scale_bench.py --peak-tflops "$peak" \
      --out "$out/bench.json" "$@" 2>"$out/bench.err"
    echo "bench: exit $?"
    tail -n 5 "$out/bench.err"
    ;;
esac
