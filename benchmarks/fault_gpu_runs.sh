#!/usr/bin/env bash
# The faults of docs/faults.md that only a GPU can show, injected for real on a GPU host, through a
# loopback Slurm cluster (one node holding every GPU). For the rows still "logic only" there:
#
#   OUT=reports/fault-gpu-runs bash benchmarks/fault_gpu_runs.sh
#
# 1. a slow GPU: a neighbour process on the last GPU keeping its SMs busy with matmuls (benchmarks/neighbour.py;
#    no clock, power or other GPU setting is touched: the machines are shared): test_matmul, test_membw,
#    test_p2p must name that GPU (busy: another process holds it; or FAILED by the floor or the node median),
#    every other GPU measured and passed;
# 2. the same node once the neighbour has ended: every test passes again (the fault was the neighbour).
# Then one table: per run, each failed or errored test and the GPUs its failed checks name. On a machine
# without GPUs it stops at once, saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null || { echo "fault_gpu_runs.sh: no nvidia-smi: needs a GPU host" >&2; exit 2; }
out=${OUT:-reports/fault-gpu-runs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
site=${GPUACCEPT_SITE:-fixtures/site/h200-multi-gpu-no-ib.yaml}
ngpu=$(nvidia-smi -L | wc -l)
slow=$((ngpu - 1))
slurm=()
[[ -x /usr/sbin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)
env=$(bash slurm/dev-cluster/up.sh --nodes 1 --gpus-per-node "$ngpu" "${slurm[@]}") || exit 1
eval "$env"
trap 'kill "${neighbour:-}" 2>/dev/null; bash slurm/dev-cluster/down.sh >/dev/null 2>&1' EXIT
run() { # name pytest-args...
  local name=$1 t0=$SECONDS
  shift
  timeout 600 python3 -m pytest -p no:cacheprovider --launcher slurm --nodes 1 --thresholds "$site" \
    --run-record "$out/$name.json" -rfE "$@" >"$out/$name.log" 2>&1
  printf '%s: exit %s, wall %s s: %s\n' "$name" "$?" "$((SECONDS - t0))" "$(tail -n 1 "$out/$name.log")" |
    tee -a "$out/summary.txt"
}
: >"$out/summary.txt"
CUDA_DEVICE_ORDER=PCI_BUS_ID python3 benchmarks/neighbour.py --gpu "$slow" --mode sm --seconds 600 \
  >"$out/neighbour.log" 2>&1 &
neighbour=$!
sleep 8
run "slow-gpu$slow" -m "acceptance and (compute or memory)"
kill "$neighbour" 2>/dev/null
wait "$neighbour" 2>/dev/null
run "neighbour-gone" -m "acceptance and (compute or memory)"
python3 - "$out" >>"$out/summary.txt" <<'PY'
import json, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    record = json.loads(path.read_text())
    print(f"\n{path.stem}: {record['status']} {record['counts']}")
    for test in record["tests"]:
        if test["verdict"] in ("failed", "error"):
            named = sorted({c["where"] for c in test.get("checks") or [] if c["verdict"] == "fail"})
            print(f"  {test['verdict'].upper()} {test['nodeid'].split('::')[-1]} [{test.get('category')}]: {named}")
PY
cat "$out/summary.txt"
