#!/usr/bin/env bash
# Record the gpubench and matmul probes' real output on this host's GPUs, launched as the suite launches them
# (tests/acceptance/conftest.py's gpubench fixture, tests/acceptance/test_compute.py's test_burn_in), for
# fixtures/gpu/ (tests/selftest/test_probe_contracts.py's RECORDED holds them to their payload types):
#
#   bash benchmarks/record_bench.sh OUTDIR        # a bare H100/H200 host: torch + nvidia-ml-py, no Slurm
#
#   OUTDIR/<kind>.gpubench.out        gpubench, one task driving every GPU (the suite's step: no arguments)
#   OUTDIR/<kind>-1gpu.gpubench.out   gpubench on GPU 0 alone (a one-GPU node's step: no pairs, no all-at-once;
#                                     on a one-GPU host the first file is that run)
#   OUTDIR/<kind>.matmul.out          matmul --burn-in, one rank per GPU, all at once (the suite's burn-in step)
#   OUTDIR/README.md                  where and when they were recorded, the commands, the RECORDED entries
#
# <kind> is the GPU model as nvidia-smi names it (``NVIDIA H200`` -> h200, ``NVIDIA H100 80GB HBM3`` ->
# h100-80gb-hbm3). Each file is the probe's raw stdout (its framed GPUACCEPT_RESULT lines), nothing edited.
# The ranks get the variables srun would give them (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
# CUDA_VISIBLE_DEVICES: the GPU of each task). BURN_IN (seconds, default 30) is the suite's --burn-in; the
# interval is the test's max(1, min(30, BURN_IN / 10)). Takes about 2 min plus BURN_IN on 8 GPUs.
set -euo pipefail
out=${1:?usage: record_bench.sh OUTDIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | sed -n 1p | sed 's/^ *//; s/ *$//')
ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c .)
kind=$(printf '%s' "$name" | tr '[:upper:]' '[:lower:]' | sed 's/^nvidia //; s/[^a-z0-9]\{1,\}/-/g; s/^-//; s/-$//')
burn=${BURN_IN:-30}
interval=$(python3 -c "import sys; print(max(1.0, min(30.0, float(sys.argv[1]) / 10)))" "$burn")
all=$(seq -s, 0 $((ngpu - 1)))
echo "record_bench: $ngpu x $name ($kind) -> $out" >&2

# the suite's gpubench step: one task, every GPU of the node visible to it
CUDA_VISIBLE_DEVICES=$all RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
  python3 -m gpuaccept.probes.gpubench >"$out/$kind.gpubench.out"
if ((ngpu > 1)); then # a one-GPU host's run above is already the one-GPU recording
  CUDA_VISIBLE_DEVICES=0 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
    python3 -m gpuaccept.probes.gpubench >"$out/$kind-1gpu.gpubench.out"
fi

# the suite's burn-in step: one rank per GPU (gpus_per_task=1), every rank at once
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pids=()
for ((i = 0; i < ngpu; i++)); do
  CUDA_VISIBLE_DEVICES=$i RANK=$i WORLD_SIZE=$ngpu LOCAL_RANK=$i LOCAL_WORLD_SIZE=$ngpu \
    python3 -m gpuaccept.probes.matmul --burn-in "$burn" --interval "$interval" >"$tmp/rank$i.out" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
for ((i = 0; i < ngpu; i++)); do cat "$tmp/rank$i.out"; done >"$out/$kind.matmul.out"

# each recording against its spec's payload type, here, so a drift shows before the files reach fixtures/
check=$(python3 - "$out" "$kind" "$ngpu" <<'PY'
import sys
from pathlib import Path
from gpuaccept.dispatch.result import parse_records
from gpuaccept.probes.specs import GPUBENCH, MATMUL
out, kind, ngpu = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
for file, spec, ranks in ((f"{kind}.gpubench.out", GPUBENCH, 1), (f"{kind}-1gpu.gpubench.out", GPUBENCH, 1),
                          (f"{kind}.matmul.out", MATMUL, ngpu)):
    if not (out / file).exists():
        continue
    try:
        for record in parse_records(spec.name, (out / file).read_text(), ranks, ()):
            spec.validate(record)
        print(f"- {file}: {ranks} rank(s), each its payload type: ok")
    except Exception as exc:  # reported in the README, the recording kept as it came
        print(f"- {file}: NOT its payload type: {exc}")
PY
)
echo "$check" >&2
{
  echo "# GPU benchmark recordings: $ngpu x $name"
  echo
  echo "Recorded $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname) by \`bash benchmarks/record_bench.sh\` at commit"
  echo "$(git rev-parse --short HEAD 2>/dev/null || echo unknown): driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | sed -n 1p),"
  echo "torch $(python3 -c 'import torch; print(torch.__version__)'). Raw stdout of each probe, not edited."
  echo
  echo "- \`$kind.gpubench.out\`: \`python3 -m gpuaccept.probes.gpubench\`, CUDA_VISIBLE_DEVICES=$all"
  ((ngpu > 1)) && echo "- \`$kind-1gpu.gpubench.out\`: the same on CUDA_VISIBLE_DEVICES=0"
  echo "- \`$kind.matmul.out\`: \`python3 -m gpuaccept.probes.matmul --burn-in $burn --interval $interval\`, one rank per GPU"
  echo
  echo "Checked against the payload types when recorded:"
  echo
  echo "$check"
  echo
  echo "RECORDED entries (tests/selftest/test_probe_contracts.py), the files under fixtures/gpu/:"
  echo
  echo '```python'
  echo "    \"gpu/$kind.gpubench.out\": (specs.GPUBENCH, 1),"
  ((ngpu > 1)) && echo "    \"gpu/$kind-1gpu.gpubench.out\": (specs.GPUBENCH, 1),"
  echo "    \"gpu/$kind.matmul.out\": (specs.MATMUL, $ngpu),"
  echo '```'
} >"$out/README.md"
echo "record_bench: wrote $(ls "$out" | tr '\n' ' ')" >&2
