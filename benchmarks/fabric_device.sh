#!/usr/bin/env bash
# The fabric tests on a multi-GPU host without InfiniBand (2 or 4 x H200 SXM 141GB were measured), through a real
# loopback Slurm cluster with one node per GPU, NCCL forced onto its network path (sockets there):
#
#   bash benchmarks/fabric_device.sh          # OUT=... to choose where logs, records and NCCL logs go
#
# 1. expect-ib: the packaged H200 expectation (NCCL over IB with GPUDirect RDMA) against this box. The
#    transport test must FAIL, naming Socket (and GDR 0) for every GPU.
# 2. socket-declared: fixtures/site/h200-socket-net.yaml declares the box's network (Socket, no
#    GDR, socket busbw floors). The transport test passes; the rails and the multi-node scale test judge
#    busbw against the site floor. GPUDirect, perftest and IB counter tests skip: the site declares no IB.
# 3. nccl-logs: the nccl probe across all nodes with --nccl-log-dir, so every rank's NCCL_DEBUG=INFO log
#    comes back under $OUT/nccl-logs (real Socket logs for fixtures/nccl/), with the probe's stdout.
#
# Slurm comes from .debs under .cache/slurmdeb unpacked into /opt/sl when the host has none (as
# benchmarks/device_suite.sh). Expected wall time on 2 GPUs: about 3 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/fabric-device}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1   # no NVLink/shared memory between the "nodes": NCCL's network path
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ngpu=$(nvidia-smi -L | wc -l)
nodes=${GPUACCEPT_FABRIC_NODES:-$ngpu}
max_bytes=${GPUACCEPT_FABRIC_MAX_BYTES:-64M}   # NCCL over TCP: keep each size's 65 launches in seconds
slurm=()
# the system's Slurm, else the carried .debs (a PATH holding /opt/sl from an earlier up.sh does not count)
[[ -x /usr/sbin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)
env=$(bash slurm/dev-cluster/up.sh --nodes "$nodes" --gpus-per-node 1 "${slurm[@]}") || exit 1
eval "$env"
trap 'bash slurm/dev-cluster/down.sh >/dev/null 2>&1' EXIT
{ nvidia-smi -L; uname -r; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
  ls /sys/class/infiniband 2>&1; env | grep ^NCCL_; } >"$out/host.txt" 2>&1

run() { # name site pytest-args...
  local name=$1 site=$2 t0=$SECONDS rc
  shift 2
  timeout 420 python3 -m pytest -p no:cacheprovider -m acceptance --launcher slurm --nodes "$nodes" \
    --thresholds "$site" --nccl-max-bytes "$max_bytes" --run-record "$out/$name.json" -rA "$@" >"$out/$name.log" 2>&1
  rc=$?
  printf '%s: exit %s, wall %s s: %s\n' "$name" "$rc" "$((SECONDS - t0))" "$(tail -n 1 "$out/$name.log")" |
    tee -a "$out/summary.txt"
  grep -E "nccl_net_transport|nccl_net_gdr|busbw" "$out/$name.log" | head -20 >>"$out/summary.txt"
}

run expect-ib fixtures/site/h200-multi-gpu-no-ib.yaml tests/acceptance/test_fabric.py -k transport
run socket-declared fixtures/site/h200-socket-net.yaml tests/acceptance/test_fabric.py \
  tests/acceptance/test_nccl.py::test_nccl_scale

mkdir -p "$out/nccl-logs"
t0=$SECONDS
timeout 300 srun --nodes "$nodes" --ntasks-per-node 1 --gpus-per-task 1 --kill-on-bad-exit=1 \
  python3 -m gpuaccept.probes.nccl --collectives all_reduce,all_gather --min-bytes 1M --max-bytes 64M \
  --iters 5 --trials 1 --nccl-log-dir "$out/nccl-logs" >"$out/nccl-logs/probe.out" 2>"$out/nccl-logs/probe.err"
printf 'nccl-logs: exit %s, wall %s s, %s log files\n' "$?" "$((SECONDS - t0))" \
  "$(ls "$out/nccl-logs" | grep -c '^nccl.rank')" | tee -a "$out/summary.txt"
grep -h -E "via NET|Using network|NET/Socket : Using|NET/IB : " "$out"/nccl-logs/nccl.rank*.log | sort | uniq -c |
  head -20 >>"$out/summary.txt"
cat "$out/summary.txt"
