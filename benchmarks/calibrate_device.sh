#!/usr/bin/env bash
# gpuaccept-calibrate on a GPU host through the loopback Slurm cluster, the GPU treated as unlisted:
#
#   1. calibrate: the whole suite CALIB_RUNS times (default 3) with --calibrate --sku H100-UNLISTED
#      (the GPU's site declarations copied under the new SKU: no NVLink fabric, no InfiniBand, no
#      device cgroups on a one-GPU VM), then the site file from the three run records;
#   2. rerun the suite with the written file: ACCEPTED expected;
#   3. rerun with a torch process hogging the GPU: NOT ACCEPTED expected, a test naming the GPU;
#   4. a table of the three steps, and the calibrated limits.
#
#   bash benchmarks/calibrate_device.sh            # on the GPU host (carry .cache/slurmdeb), about 6 min
#
# Slurm comes from .debs under .cache/slurmdeb unpacked into /opt/sl when the host has none
# (benchmarks/device_suite.sh). Logs, run records and the site file go to $OUT (or
# reports/calibrate-device). Without a GPU it calibrates the CPU nodes under a made-up name on
# CALIB_PYTEST_ARGS (default: the NCCL node test) and skips the hog step: a check of the script only.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/calibrate-device}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
runs=${CALIB_RUNS:-3}
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU')
slurm=()
[[ -x /usr/sbin/slurmctld ]] || [[ -x /usr/bin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)
if ((ngpu)); then
  sku=H100-UNLISTED site=${GPUACCEPT_SITE:-fixtures/site/h100-1gpu.yaml}
  calib=(--sku "$sku" --thresholds "$out/base.yaml")
  select=(${CALIB_PYTEST_ARGS:-})
else
  sku=CPU-UNLISTED site=${GPUACCEPT_SITE:-}
  calib=(--sku "$sku" --gpu-name "Fake CPU GPU" --inherits none --straggler-pct 90 --k 30) # loopback noise
  select=(${CALIB_PYTEST_ARGS:-tests/acceptance/test_nccl.py::test_nccl_node})
fi
: >"$out/summary.txt"
note() { printf '%s\n' "$*" | tee -a "$out/summary.txt"; }
note "calibrate_device on $(hostname): $ngpu GPU(s) $( ((ngpu)) && nvidia-smi --query-gpu=name --format=csv,noheader | sort -u)"

gres=()
((ngpu)) && gres=(--gpus-per-node "$ngpu")
env=$(bash slurm/dev-cluster/up.sh --nodes 1 "${gres[@]}" "${slurm[@]}") || { note "up.sh failed"; exit 1; }
eval "$env"
trap 'bash slurm/dev-cluster/down.sh >/dev/null 2>&1' EXIT

if ((ngpu)); then # the site's declarations for this GPU, under the new SKU's name (it inherits gpu-node)
  python3 - "$site" "$sku" "$out/base.yaml" <<'PY' || exit 1
import subprocess, sys, yaml
from pathlib import Path
from gpuaccept.thresholds.loader import load_thresholds
site, sku, dest = sys.argv[1:]
name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.splitlines()[0].strip()
listed = load_thresholds(Path(site)).sku_for_gpu(name)
raw = yaml.safe_load(open(site))
declared = (raw.get("skus", {}).get(listed) or {}).get("limits", {})
doc = {"schema_version": 1, "skus": {sku: {"match": [], "inherits": "gpu-node", "limits": declared}}}
yaml.safe_dump(doc, open(dest, "w"), sort_keys=False, width=200)
print(f"{name}: listed as {listed}; {len(declared)} site declarations copied under {sku}: {', '.join(declared)}")
PY
fi

step() { # name command... ; prints exit and wall
  local name=$1 t0 rc
  shift
  t0=$(date +%s.%N)
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  printf '%s: exit %s, wall %s s\n' "$name" "$rc" "$(python3 -c "print(round($(date +%s.%N)-$t0,1))")" | tee -a "$out/summary.txt"
  return $rc
}

# a cold page cache makes the first run's start-up (torch, transformers) slower than the others, and the
# calibration would rightly refuse a train_wall_s that disagrees: warm it first, as device_suite.sh does
python3 -c "import torch, transformers, peft" >/dev/null 2>&1
step calibrate python3 -m gpuaccept.calibrate.cli "${calib[@]}" --runs "$runs" --records-dir "$out/runs" \
  --out "$out/site-calibrated.yaml" -- --launcher slurm --nodes 1 "${select[@]}"
tail -n 40 "$out/calibrate.log" | tee -a "$out/summary.txt"
[[ -f $out/site-calibrated.yaml ]] || { note "no calibrated file: see $out/calibrate.log"; exit 1; }

suite() { # record-name
  python3 -m pytest -p no:cacheprovider -m acceptance --launcher slurm --nodes 1 --thresholds "$out/site-calibrated.yaml" \
    --sku "$sku" --run-record "$out/$1.json" -rfE "${select[@]}"
}
step rerun suite rerun
if ((ngpu)); then
  python3 -c "
import time, torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
print('hog running', flush=True)
while True:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
" >"$out/hog.log" 2>&1 &
  hog=$!
  sleep 15
  step hogged suite hogged
  kill "$hog" 2>/dev/null
  wait "$hog" 2>/dev/null
fi

python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, sys
from pathlib import Path
from gpuaccept.report.summary_model import overview
out = Path(sys.argv[1])
print(f"\n{'step':<10} {'verdict':<14} {'counts':<40} what did not pass (first line)")
for name in ("rerun", "hogged"):
    path = out / f"{name}.json"
    if not path.exists():
        continue
    record = json.loads(path.read_text())
    view = overview(record)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(view.counts.items()))
    print(f"{name:<10} {view.verdict:<14} {counts:<40}")
    for t in record["tests"]:
        if t["verdict"] in ("failed", "error"):
            print(f"{'':<10} {t['verdict']:<6} {t['nodeid'].split('::')[-1]}: {(t['message'] or '').splitlines()[0][:160]}")
            gpu = [line.strip() for line in (t["message"] or "").splitlines() if "GPU" in line][:2]
            for line in gpu:
                print(f"{'':<17} {line[:160]}")
PY
