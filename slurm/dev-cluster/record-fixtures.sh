#!/usr/bin/env bash
# Record what a Slurm version prints for the commands gpuaccept's dispatcher reads, into
# fixtures/slurm/<version>/, for tests/selftest/test_slurm_versions.py. Starts its own 2-node
# loopback cluster (up.sh --slurm VERSION), drains node2 with a gpuaccept reason, kills node2's
# slurmd and waits until Slurm marks it not responding and then DOWN (about SlurmdTimeout, 30 s), so the outputs
# show a drained and a dead node as a real cluster would. The cluster is stopped on any exit.
#
#   slurm/dev-cluster/record-fixtures.sh 22.05|24.11|26.05
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${1:?usage: record-fixtures.sh 22.05|24.11|26.05}
out=$here/../../fixtures/slurm/$version
mkdir -p "$out"
out=$(cd "$out" && pwd)

eval "$("$here/up.sh" --nodes 2 --slurm "$version")"
trap '"$here/down.sh" --clean "$GPUACCEPT_DEV_CLUSTER" || true' EXIT

rec() { # rec FILE CMD...: stdout to FILE, stderr to FILE.stderr when there is any, exit code kept
  local file=$1
  shift
  local rc=0
  "$@" >"$out/$file" 2>"$out/$file.stderr" || rc=$?
  [[ -s $out/$file.stderr ]] || rm -f "$out/$file.stderr"
  ((rc == 0)) || echo "$rc" >"$out/$file.rc"
}

rec version.txt sinfo --version
rec scontrol-show-partition.txt scontrol -a -o show partition
# a running step, as SlurmLauncher._cancel_step lists them
srun -N1 -w node1 --job-name=gpuaccept-sleep sleep 30 &
sleeper=$!
for _ in $(seq 50); do squeue -h -s -o %i | grep -q '\.0$' && break; sleep 0.2; done
job=$(squeue -h -o %i | head -n1)
rec squeue-steps.txt squeue -h -s -j "$job" -o '%i|%j'
rec sinfo-nodes-busy.txt sinfo -h -N -p main -o '%N|%T|%G|%E'
scancel "$job"
wait "$sleeper" || true
# a fan-out step as gpuaccept/dispatch/fanout.py reads it (--label -v, --kill-on-bad-exit=0), task 3 failing
# shellcheck disable=SC2016 # expanded by each task
rec srun-fanout.txt srun -N2 -n4 --ntasks-per-node=2 --kill-on-bad-exit=0 --label -v bash -c \
  'echo "out of task $SLURM_PROCID on $SLURMD_NODENAME"; if [ "$SLURM_PROCID" = 3 ]; then exit 3; fi'
# options later versions dropped, as srun says it
rec srun-cpu-bind-rank.txt srun -N1 -w node1 --cpu-bind=rank true
rec srun-uid.txt srun -N1 -w node1 --uid=0 true

# node2 drained by gpuaccept, then dead: the reason as Slurm keeps it
scontrol update nodename=node2 state=drain reason="gpuaccept: hbm_bandwidth below limit"
rec scontrol-show-node-drained.txt scontrol show node node2
"$here/kill-node.sh" node2
# not responding at the first failed ping, DOWN after SlurmdTimeout (30 s)
for _ in $(seq 90); do
  scontrol show node node2 | grep -q 'State=[A-Z+]*DOWN' && break
  sleep 1
done
rec sinfo-nodes.txt sinfo -h -N -p main -o '%N|%T|%G|%E'
rec scontrol-show-node.txt scontrol show node node2
rec sinfo-R.txt sinfo -R -h -o '%N|%E'
# --json: data_parser versions, and whether filters are applied
rec sinfo.json sinfo --json
rec sinfo-filtered.json sinfo --json -n node1
rec scontrol-show-node.json scontrol show node node1 --json
"$here/down.sh" --clean "$GPUACCEPT_DEV_CLUSTER"

# --gpus-per-task: how each version binds a task to its GPU (22.05: an implied --gpu-bind=per_task;
# 24.11 on: an implied --tres-bind=gres/gpu:per_task). One node with two GPUs on fake device files
# (slurmd only stats them): what each task of `srun -n2 --gpus-per-task=1` is given.
fake=$(mktemp -d /tmp/gpuaccept-fakegpu.XXXX)
mknod "$fake/nvidia0" c 195 0
mknod "$fake/nvidia1" c 195 1
trap '"$here/down.sh" --clean "$GPUACCEPT_DEV_CLUSTER" || true; rm -rf "$fake"' EXIT
eval "$(GPUACCEPT_DEV_GPU_FILE=$fake/nvidia "$here/up.sh" --nodes 1 --gpus-per-node 2 --slurm "$version")"
# shellcheck disable=SC2016 # expanded by each task
rec srun-gpus-per-task.txt srun -N1 -n2 --gpus-per-task=1 --label bash -c \
  'env | grep -E "^(CUDA_VISIBLE_DEVICES|SLURM_STEP_GPUS|SLURM_GPUS_PER_TASK|SLURM_[A-Z_]*BIND[A-Z_]*)=" | sort'
echo "recorded Slurm $version outputs in $out" >&2
