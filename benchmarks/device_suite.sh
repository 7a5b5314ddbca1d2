#!/usr/bin/env bash
# The whole acceptance suite on one multi-GPU host through a real loopback Slurm cluster, as the
# suite's own end-to-end check on a GPU machine (not for production clusters, which have Slurm).
#
#   bash benchmarks/device_suite.sh [runs]
#
# Layout 1: one Slurm node holding every GPU (node-local tests: health, compute, memory, P2P, NCCL,
# DDP/FSDP on all GPUs). Layout 2: one Slurm node per GPU (multi-node NCCL scaling, bisection and
# training paths with NCCL). Slurm comes from .debs under .cache/slurmdeb unpacked into /opt/sl when
# the host has no Slurm. Logs and run records go to $OUT (or reports/device).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
out=${OUT:-reports/device}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
site=${GPUACCEPT_SITE:-fixtures/site/lent-h200-no-ib.yaml}
mark=${GPUACCEPT_MARK:-acceptance}
ngpu=$(nvidia-smi -L | wc -l)
slurm=()
# the system's Slurm, else the carried .debs (a PATH holding /opt/sl from an earlier up.sh does not count)
[[ -x /usr/sbin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)

layout() { # name nodes gpus-per-node pytest-args...
  local name=$1 nodes=$2 per=$3 env t0 rc
  shift 3
  env=$(bash slurm/dev-cluster/up.sh --nodes "$nodes" --gpus-per-node "$per" "${slurm[@]}") || return 1
  eval "$env"
  t0=$SECONDS
  python3 -m pytest -p no:cacheprovider -m "$mark" --launcher slurm --nodes "$nodes" --thresholds "$site" \
    --run-record "$out/$name.json" -rfE "$@" >"$out/$name.log" 2>&1
  rc=$?
  printf '%s: exit %s, wall %s s: %s\n' "$name" "$rc" "$((SECONDS - t0))" \
    "$(tail -n 1 "$out/$name.log")" | tee -a "$out/summary.txt"
  python3 benchmarks/suite_sections.py "$out/$name.json" | tee -a "$out/summary.txt"
  bash slurm/dev-cluster/down.sh >/dev/null 2>&1
  return $rc
}

for i in $(seq 1 "$runs"); do
  layout "one-node-run$i" 1 "$ngpu"
done
if ((ngpu >= 2)) && [[ ${GPUACCEPT_MULTINODE:-1} == 1 ]]; then
  layout two-nodes 2 $((ngpu / 2)) -m "($mark) and multinode"
fi
grep -h -E "^(FAILED|ERROR)" "$out"/*.log | sort | uniq -c | head -40
