#!/usr/bin/env bash
# The whole acceptance suite on one multi-GPU host through a real loopback Slurm cluster, as the
# suite's own end-to-end check on a GPU machine (not for production clusters, which have Slurm).
#
#   bash benchmarks/device_suite.sh [runs] [pytest-args...]  # the suite `runs` times (and the two-node layout)
#   bash benchmarks/device_suite.sh 0          # the two-node layout alone (-m 'acceptance and multinode')
#   GPUACCEPT_MULTINODE=0 bash benchmarks/device_suite.sh 1   # one run of layout 1 alone
#   bash benchmarks/device_suite.sh --batch     # everything one 10-minute run on a GPU host should bring back (below)
#
# Layout 1: one Slurm node holding every GPU (node-local tests: health, compute, memory, P2P, NCCL,
# each GPU's own fine-tune, DDP/FSDP on all GPUs). Layout 2: one Slurm node per GPU (multi-node NCCL
# scaling, bisection and training paths with NCCL). Slurm comes from .debs under .cache/slurmdeb
# unpacked into /opt/sl when the host has no Slurm. Logs and run records go to $OUT (or reports/device).
# The site file is the one written for the host's GPUs (fixtures/site/h100-*.yaml, h200-*.yaml), picked by
# the GPUs' name and count, unless GPUACCEPT_SITE names one. A run of both layouts on 2 GPUs takes ~10 minutes: give each its own call.
#
# --batch (at most 10 minutes on a 2 x H200 SXM 141GB host; carry .cache/slurmdeb):
#   1. the one-process GPU benchmark by hand: matmul over 7 sizes (is the best size stable?) and the
#      host links with 1 GiB copies (the suite's 256 MiB figure against the earlier default);
#      and the NCCL sweep proposed for the suite (2 GiB, 10 x 3 timed launches), by hand;
#   2. the whole suite three times through Slurm (no burn-in, no multi-node layout), each run timed;
#   3. benchmarks/suite_sections.py over the three run records: per section and per probe phase,
#      min / median / max, and every figure's spread (runs and timed batches) with the host links
#      alone and all at once;
#   4. the fleet re-measure (benchmarks/fleet_bench.py, 1 / 4 / 8 loopback nodes), with the per-node
#      unpinned and with every slurmd on CPUs of its own, as long as the
#      time budget (GPUACCEPT_BATCH_BUDGET_S, default 540 s) leaves room for it.
# Everything lands in $OUT as summary.txt plus one batch.tar.gz (the run records, logs, JSON); the
# summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/device}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mark=${GPUACCEPT_MARK:-acceptance}
ngpu=$(nvidia-smi -L | wc -l)
# the site file for these GPUs (what it declares absent: IB, NVLink on a one-GPU VM, device cgroups), by the
# GPU's name and count, unless GPUACCEPT_SITE names one: the same script runs on H100 and H200 hosts
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu_name:$ngpu" in
  *H100*:1) default_site=fixtures/site/h100-1gpu.yaml ;;
  *H100*) default_site=fixtures/site/h100-multi-gpu-no-ib.yaml ;;
  *H200*:1) default_site=fixtures/site/h200-1gpu.yaml ;;
  *) default_site=fixtures/site/h200-multi-gpu-no-ib.yaml ;;
esac
site=${GPUACCEPT_SITE:-$default_site}
# GPUACCEPT_RUN_NAME: the runs' file names (several calls of this script under one $OUT)
run_name=${GPUACCEPT_RUN_NAME:-one-node-run}
slurm=()
# the system's Slurm, else the carried .debs (a PATH holding /opt/sl from an earlier up.sh does not count)
[[ -x /usr/sbin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)

layout() { # name nodes gpus-per-node pytest-args...
  local name=$1 nodes=$2 per=$3 env t0 rc
  shift 3
  env=$(bash slurm/dev-cluster/up.sh --nodes "$nodes" --gpus-per-node "$per" "${slurm[@]}") || return 1
  ((${#slurm[@]})) && slurm=(--prefix /opt/sl) # unpacked once; later clusters reuse the prefix
  eval "$env"
  t0=$(date +%s.%N)
  python3 -m pytest -p no:cacheprovider -m "$mark" --launcher slurm --nodes "$nodes" --thresholds "$site" \
    --run-record "$out/$name.json" -rfE "$@" >"$out/$name.log" 2>&1
  rc=$?
  printf '%s: exit %s, wall %s s: %s\n' "$name" "$rc" "$(python3 -c "print(round($(date +%s.%N)-$t0,1))")" \
    "$(tail -n 1 "$out/$name.log")" | tee -a "$out/summary.txt"
  python3 benchmarks/suite_sections.py "$out/$name.json" >>"$out/sections.txt" 2>&1
  bash slurm/dev-cluster/down.sh >/dev/null 2>&1
  return $rc
}

if [[ ${1:-} != --batch ]]; then
  runs=${1:-1}
  shift || true
  for i in $(seq 1 "$runs"); do
    layout "$run_name$i" 1 "$ngpu" "$@"
  done
  if ((ngpu >= 2)) && [[ ${GPUACCEPT_MULTINODE:-1} == 1 ]]; then
    layout two-nodes 2 $((ngpu / 2)) -m "($mark) and multinode"
  fi
  cat "$out/sections.txt"
  grep -h -E "^(FAILED|ERROR)" "$out"/*.log | sort | uniq -c | head -40
  exit 0
fi

# ---- --batch ------------------------------------------------------------------------------------
budget=${GPUACCEPT_BATCH_BUDGET_S:-540}
started=$SECONDS
left() { echo $((budget - (SECONDS - started))); }
note() { printf '%s\n' "$*" | tee -a "$out/summary.txt"; }
: >"$out/summary.txt"
note "batch on $(hostname): $ngpu GPU(s), $(nproc) CPUs, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c | tr -s ' ')"
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" 2>&1 | tee -a "$out/summary.txt"

# 1. the GPU benchmark by hand (warm-up of the page cache for torch as a side effect)
t0=$SECONDS
timeout 150 python3 -m gpuaccept.probes.gpubench --parts matmul,hostbw --sizes 4096,6144,8192,10240,12288,14336,16384 \
  --hostbw-size 1G >"$out/gpubench-sweep.out" 2>"$out/gpubench-sweep.err"
note "gpubench sweep (7 matmul sizes, host links with 1 GiB copies): exit $?, $((SECONDS - t0)) s"

# 1b. the NCCL sweep the report proposes for the suite (2 GiB largest, 10 x 3 timed, 3 warm-up), by hand
t0=$SECONDS
timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node "$ngpu" -m gpuaccept.probes.nccl \
  --max-bytes 2G --iters 10 --warmup 3 >"$out/nccl-proposal.out" 2>"$out/nccl-proposal.err"
note "nccl sweep to 2 GiB, 10 x 3 timed, 3 warm-up: exit $?, $((SECONDS - t0)) s (the suite's default sweep: see the runs)"
python3 benchmarks/nccl_table.py "$out/nccl-proposal.out" >"$out/nccl-proposal.txt" 2>&1

# 2. the whole suite three times, one Slurm node holding every GPU
for i in $(seq 1 "${GPUACCEPT_BATCH_RUNS:-3}"); do
  if (($(left) < 120)); then note "suite run $i skipped: $(left) s of the budget left"; break; fi
  layout "suite-run$i" 1 "$ngpu"
done

# 3. sections, phases and spread over the runs
records=("$out"/suite-run*.json)
python3 benchmarks/suite_sections.py "${records[@]}" >"$out/spread.txt" 2>&1

# 4. the fleet re-measure, as far as the budget goes (each variant ~60-90 s on the 32-core host)
[[ -x /usr/sbin/slurmctld ]] || export GPUACCEPT_UP_ARGS="--prefix /opt/sl" # unpacked by the first suite run
for variant in "" "--pin"; do
  if (($(left) < 100)); then note "fleet $variant skipped: $(left) s of the budget left"; continue; fi
  name=fleet${variant// /}
  # shellcheck disable=SC2086
  timeout $(($(left) - 10)) python3 benchmarks/fleet_bench.py $variant --nodes ${GPUACCEPT_FLEET_NODES:-1 4 8} --skip dispatch --rounds 3 \
    --json "$out/$name.json" >"$out/$name.txt" 2>&1
  note "fleet $variant: exit $?"
done

python3 benchmarks/gpubench_table.py "$out/gpubench-sweep.out" >"$out/gpubench-sweep.txt" 2>&1

tar -czf "$out/batch.tar.gz" -C "$out" --exclude=batch.tar.gz --exclude=summary.txt . 2>/dev/null
# keep what comes back to the 8-file limit: the tarball and the summary
find "$out" -mindepth 1 -maxdepth 1 ! -name batch.tar.gz ! -name summary.txt -exec rm -rf {} +
tar -xzf "$out/batch.tar.gz" -C /tmp ./spread.txt ./gpubench-sweep.txt ./nccl-proposal.txt 2>/dev/null
runs_lines=$(grep -E "^suite-run" "$out/summary.txt") # (grep will not read the file it appends to)
{
  echo
  echo "=== suite runs"
  echo "$runs_lines"
  echo
  echo "=== sections, phases and spread over the runs"
  cat /tmp/spread.txt
  echo
  echo "=== GPU benchmark by hand"
  cat /tmp/gpubench-sweep.txt
  echo
  echo "=== NCCL, the proposed shorter sweep by hand"
  cat /tmp/nccl-proposal.txt
  echo
  echo "=== fleet"
  tar -xzf "$out/batch.tar.gz" -O --wildcards './fleet*.txt' 2>/dev/null
  echo
  echo "batch wall $((SECONDS - started)) s"
} >>"$out/summary.txt"
cat "$out/summary.txt"
