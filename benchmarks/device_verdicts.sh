#!/usr/bin/env bash
# Are the verdicts earned on real GPUs? Through a real loopback Slurm cluster on a multi-GPU host:
#
#   bash benchmarks/device_verdicts.sh        # OUT=... for where the records, logs and summary go
#
# 1. the hardware section ("acceptance and not training") five times in a row on one node holding every
#    GPU: every run must pass, except findings the evidence shows are real;
# 2. the same section with a process hogging the last GPU (a torch matmul loop started first): the
#    GPU benchmarks must ERROR or FAIL naming exactly that GPU, and measure the others;
# 4. the whole suite once (training included), for its summary page;
# 5. the multi-node layout (one loopback node per GPU pair or GPU): NCCL scale and bisection, the
#    fabric tests, multi-node DDP/FSDP, the shared filesystem, cross-node consistency;
# then one table of every run's verdicts and what named which GPU. Slurm comes from .debs under
# .cache/slurmdeb when the host has none (see benchmarks/device_suite.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/device-verdicts}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
site=${GPUACCEPT_SITE:-fixtures/site/h200-multi-gpu-no-ib.yaml}
ngpu=$(nvidia-smi -L | wc -l)
slurm=()
[[ -x /usr/sbin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)

up() { # nodes gpus-per-node
  local env
  env=$(bash slurm/dev-cluster/up.sh --nodes "$1" --gpus-per-node "$2" "${slurm[@]}") || exit 1
  ((${#slurm[@]})) && slurm=(--prefix /opt/sl) # unpacked once
  eval "$env"
}
run() { # name pytest-args...
  local name=$1 t0=$SECONDS rc
  shift
  timeout 300 python3 -m pytest -p no:cacheprovider --launcher slurm --thresholds "$site" \
    --run-record "$out/$name.json" -rfE "$@" >"$out/$name.log" 2>&1
  rc=$?
  printf '%s: exit %s, wall %s s: %s\n' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$out/$name.log")" |
    tee -a "$out/summary.txt"
}

: >"$out/summary.txt"
up 1 "$ngpu"
for i in 1 2 3 4 5; do
  run "hardware-run$i" -m "acceptance and not training" --nodes 1
done
hog=$((ngpu - 1))
CUDA_VISIBLE_DEVICES=$hog python3 -c "
import torch
a = torch.randn(8192, 8192, device='cuda')
while True:
    a = (a @ a).clamp_(-1, 1)
" &
hog_pid=$!
sleep 10
run "hog-gpu$hog" -m "acceptance and (gpu_health or compute or memory or interconnect)" --nodes 1
kill "$hog_pid"
wait "$hog_pid" 2>/dev/null
# 4. the whole suite once more (training included): its summary page and curves come back for docs/
run suite -m acceptance --nodes 1
cp reports/summary.html "$out/summary-suite.html" 2>/dev/null
tar -czf "$out/suite-reports.tar.gz" reports/training/*/*/history.json reports/nccl 2>/dev/null
bash slurm/dev-cluster/down.sh >/dev/null 2>&1
if ((ngpu >= 2)); then
  up 2 $((ngpu / 2))
  run two-nodes -m "acceptance and multinode" --nodes 2
  bash slurm/dev-cluster/down.sh >/dev/null 2>&1
fi
python3 - "$out" "$hog" >>"$out/summary.txt" <<'PY'
import json, pathlib, sys
out, hog = pathlib.Path(sys.argv[1]), sys.argv[2]
for path in sorted(out.glob("*.json")):
    if path.name == "latest.json":
        continue
    record = json.loads(path.read_text())
    print(f"\n{path.stem}: {record['status']} {record['counts']} in {record['duration_s']} s")
    for test in record["tests"]:
        name = test["nodeid"].split("::")[-1]
        if test["verdict"] in ("failed", "error"):
            print(f"  {test['verdict'].upper()} {name} [{test['category']}]: {test['message'].splitlines()[0][:300]}")
            for line in test["message"].splitlines()[1:6]:
                print(f"      {line[:200]}")
        unearned = test["verdict"] == "passed" and not any(c["verdict"] == "pass" for c in test["checks"])
        if unearned:
            print(f"  UNEARNED PASS {name}")
    if path.stem.startswith("hog"):
        named = {t["nodeid"].split("::")[-1]: (f"GPU {hog} " in t["message"] or f"GPU {hog} (" in t["message"]) for t in record["tests"] if t["verdict"] in ("failed", "error")}
        others = [m for m in record["metrics"] if m["gpu"] and not m["gpu"].startswith(hog) and m["verdict"] == "pass"]
        print(f"  hog on GPU {hog}: non-passing tests naming it: {named}; passing checks on the other GPUs: {len(others)}")
PY
tar -czf "$out/verdicts.tar.gz" -C "$out" --exclude=verdicts.tar.gz --exclude=summary.txt --exclude=summary-suite.html \
  --exclude=suite-reports.tar.gz . 2>/dev/null
find "$out" -mindepth 1 -maxdepth 1 ! -name verdicts.tar.gz ! -name summary.txt ! -name summary-suite.html \
  ! -name suite-reports.tar.gz -exec rm -rf {} +
cat "$out/summary.txt"
