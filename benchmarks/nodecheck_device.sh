#!/usr/bin/env bash
# The node check's wall time on a GPU host, as Slurm would pay it (no Slurm needed: --gpus gives the
# declared count), and what it says with a GPU hog and with injected faults. Under 2 minutes.
#
#   bash benchmarks/nodecheck_device.sh          # writes $OUT (default reports/nodecheck-device)
#
# Runs, each a fresh `python -m gpuaccept.nodecheck` process timed from outside:
#   cold    the first run (page cache dropped first where this host lets root do it)
#   warm    5 more runs, median and spread
#   hog     a torch process holding GPU 0 (memory + matmul): must be named
#   fault   this GPU's own NVML readings (gpu_health --dump) with 2 uncorrected ECC errors on GPU 0
#   hang    the same readings behind a FIFO nobody writes (a hung read): must time out at --check-timeout
# The site thresholds default by GPU model and count to fixtures/site/h100-*.yaml or h200-*.yaml (GPUACCEPT_SITE overrides);
# reports/expected-fingerprint.json, if an acceptance run wrote one here, is the expected stack.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/nodecheck-device}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python=${GPUACCEPT_PYTHON:-python3}
# a host without a GPU (a CPU check of the script): no hog, and the fault goes into the recorded 2 x H200 dump
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
case $model in
  *H100*) site=${GPUACCEPT_SITE:-fixtures/site/h100-1gpu.yaml} ;;
  *H200*) ((ngpu > 1)) && site=${GPUACCEPT_SITE:-fixtures/site/h200-multi-gpu-no-ib.yaml} || site=${GPUACCEPT_SITE:-fixtures/site/h200-1gpu.yaml} ;;
  *) site=${GPUACCEPT_SITE:-fixtures/site/h200-multi-gpu-no-ib.yaml} ;;
esac
expected=reports/expected-fingerprint.json
[[ -f $expected ]] || expected=$out/no-expected-fingerprint.json
common=(--gpus "$ngpu" --node "$(hostname -s)" --state-dir "$out/state" --thresholds "$site" --expected "$expected")
rm -rf "$out/state"
# the limits slurmd runs with (its upstream systemd unit: LimitNOFILE=131072, LimitMEMLOCK=infinity), which
# the check reads as its own; a login shell's 1024 open files would otherwise be the finding
ulimit -n "$(ulimit -Hn)" 2>/dev/null
ulimit -l unlimited 2>/dev/null

# run NAME ARGS...: one timed check; its JSON in $out/NAME.json, one row in $out/rows.tsv
run() {
  local name=$1 t0 t1 rc
  shift
  t0=$(date +%s.%N)
  "$python" -m gpuaccept.nodecheck "${common[@]}" --json "$@" >"$out/$name.json" 2>"$out/$name.err"
  rc=$?
  t1=$(date +%s.%N)
  "$python" - "$out/$name.json" "$name" "$rc" "$t0" "$t1" >>"$out/rows.tsv" <<'PY'
import json, sys
path, name, rc, t0, t1 = sys.argv[1:]
try:
    d = json.load(open(path))
except ValueError:
    d = {"verdict": "no output", "seconds": None, "failed": [], "errors": []}
slowest = max((r for r in (d.get("readers") or {}).items()), key=lambda kv: kv[1]["seconds"] or 0, default=("-", {}))
said = "; ".join(d.get("failed") or d.get("errors") or []) or "-"
print("\t".join([name, f"{float(t1) - float(t0):.2f}", str(d.get("seconds")), rc, d.get("verdict", "?"),
                 f"{slowest[0]} {slowest[1].get('seconds')}", str(d.get("checks")), said[:160]]))
PY
}

: >"$out/rows.tsv"
: >"$out/checks.txt"
# cold: a first run after the page cache is dropped (root on a bare host; a container usually may not)
sync
if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then cold=cold-cache-dropped; else cold=cold-first-run; fi
run "$cold"
for i in 1 2 3 4 5; do run "warm$i"; done

# a GPU hog: the python itself in the background, so $! is the process holding GPU 0 (memory + matmul)
# until killed (a `cmd && bash -c ... &` list would put a subshell between them and leave it running)
if ((ngpu)); then
  "$python" -c '
import torch, time
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("hog ready", flush=True)
while True:
    y = x @ x
    torch.cuda.synchronize()
' >"$out/hog.log" 2>&1 &
  hog=$!
  for _ in $(seq 1 60); do grep -q "hog ready" "$out/hog.log" && break; sleep 0.5; done
  run hog
  kill "$hog" 2>/dev/null
  wait "$hog" 2>/dev/null
  # (inside a container NVML may give the host's pid for it, so the finding is shown, not matched)
  named=$(grep -o '"gpu_foreign_processes GPU0 [^"]*"' "$out/hog.json" | head -n 1)
  echo "hog (pid $hog here): ${named:-NOT named}" >>"$out/checks.txt"
fi

# injected fault: this GPU's own readings with 2 uncorrected ECC errors on GPU 0
if ((ngpu)); then
  "$python" -m gpuaccept.probes.gpu_health --dump "$out/gpu_health.json" >/dev/null
  dumped=()
else
  cp fixtures/nvml/h200-2gpu.gpu_health.json "$out/gpu_health.json"
  dumped=(--gpus 2 --sku H200) # the recorded node's own count and SKU
fi
"$python" - "$out/gpu_health.json" "$out/gpu_health.ecc.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
data["gpus"][0]["ecc_uncorrected_volatile"] = 2
json.dump(data, open(sys.argv[2], "w"))
PY
run fault-ecc --nvml-load "$out/gpu_health.ecc.json" "${dumped[@]}"
grep -q "gpu_ecc_uncorrected_volatile GPU0 2 " "$out/fault-ecc.json" && echo "ECC fault named" >>"$out/checks.txt" ||
  echo "ECC fault NOT named" >>"$out/checks.txt"

# a hung read: the readings behind a FIFO nobody writes; the watchdog must cut it at 3 s
rm -f "$out/hung.fifo"
mkfifo "$out/hung.fifo"
run hang --nvml-load "$out/hung.fifo" --check-timeout 3 "${dumped[@]}"
rm -f "$out/hung.fifo"

{
  echo "node check on $(hostname -s): $ngpu x ${model:-no GPU}, driver ${driver:-none}, site $site, $(date -u +%FT%TZ)"
  printf '%-22s %8s %8s %4s %-16s %-22s %6s %s\n' run wall_s own_s rc verdict "slowest reader (s)" checks "findings"
  while IFS=$'\t' read -r name wall own rc verdict slowest checks said; do
    printf '%-22s %8s %8s %4s %-16s %-22s %6s %s\n' "$name" "$wall" "$own" "$rc" "$verdict" "$slowest" "$checks" "$said"
  done <"$out/rows.tsv"
  "$python" - "$out/rows.tsv" <<'PY'
import statistics, sys
rows = [line.split("\t") for line in open(sys.argv[1]) if line.startswith("warm")]
walls = sorted(float(r[1]) for r in rows)
if walls:
    print(f"warm wall: median {statistics.median(walls):.2f} s, min {walls[0]:.2f}, max {walls[-1]:.2f} (n={len(walls)})")
PY
  cat "$out/checks.txt"
} | tee "$out/summary.txt"
