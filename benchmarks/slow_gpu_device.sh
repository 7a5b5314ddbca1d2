#!/usr/bin/env bash
# A slow GPU made by a neighbour process, never by a GPU setting: the suite must name that GPU by its own
# figures and judge the others as on a healthy run, within its time budget.
#
#   OUT=... bash benchmarks/slow_gpu_device.sh [pytest -k expression]   # on a multi-GPU host (carry .cache/slurmdeb)
#
# GPU 2 gets a neighbour streaming its HBM (2 GiB copies in a loop) and GPU 1 one keeping its SMs busy with
# bf16 matmuls (benchmarks/neighbour.py, NVML's index order); both end by themselves. Then the suite runs on one
# loopback Slurm node holding every GPU (benchmarks/device_suite.sh), by default the whole suite (a -k
# expression narrows it). What comes back: the run record, the log, the neighbours' own rates, and a table of
# every GPU's speed checks.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/device}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
expr=${1:-}
select=()
[[ -n $expr ]] && select=(-k "$expr")
python3 benchmarks/neighbour.py --gpu 2 --mode hbm --seconds 600 >"$out/neighbour-hbm.log" 2>&1 &
hbm=$!
python3 benchmarks/neighbour.py --gpu 1 --mode sm --seconds 600 >"$out/neighbour-sm.log" 2>&1 &
sm=$!
sleep 8
t0=$SECONDS
GPUACCEPT_MULTINODE=0 GPUACCEPT_RUN_NAME=slow OUT=$out bash benchmarks/device_suite.sh 1 "${select[@]}" >/dev/null 2>&1
echo "slow-GPU run: $((SECONDS - t0)) s"
kill "$hbm" "$sm" 2>/dev/null
wait 2>/dev/null
tail -n 30 "$out/slow1.log"
python3 - "$out/slow1.json" <<'PY'
import json, sys
record = json.load(open(sys.argv[1]))
for m in record["metrics"]:
    if m["metric"] in ("train_mfu_pct", "train_gpu_util_pct") or m["verdict"] not in ("pass", "info"):
        extra = {k: m["extra"].get(k) for k in ("bound", "progress", "stopped") if m.get("extra", {}).get(k)}
        print(m["metric"], m["node"], m["subject"], m["value"], m["verdict"], json.dumps(extra)[:400])
for t in record["tests"]:
    for s in t.get("steps", []):
        if s["probe"] == "finetune":
            print("step", t["nodeid"].split("::")[-1], "limit", s["limit_s"], "wall", s["wall_s"], "ratio", s["ratio"])
PY
rm -f "$out"/*.metrics.csv "$out/latest.json" "$out/sections.txt"
