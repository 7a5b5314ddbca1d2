#!/usr/bin/env bash
# Run a command in one loopback node's mount namespace (a cluster started with up.sh --own-mounts): what it
# mounts or unmounts there only that node's steps see, as on a real node whose filesystem broke alone.
#
#   slurm/dev-cluster/node-exec.sh NODE [DIR] -- COMMAND...   # DIR defaults to $GPUACCEPT_DEV_CLUSTER
#   slurm/dev-cluster/node-exec.sh node2 -- mount -t tmpfs -o size=64k tmpfs /mnt/chkpt   # node2's path full
set -euo pipefail

log() { printf 'node-exec.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

node=${1:-}
shift || true
dir=${GPUACCEPT_DEV_CLUSTER:-}
if [[ ${1:-} != -- ]]; then
  dir=${1:-}
  shift || true
fi
[[ ${1:-} == -- ]] || die "usage: node-exec.sh NODE [DIR] -- COMMAND..."
shift
[[ -n $node && $# -gt 0 ]] || die "usage: node-exec.sh NODE [DIR] -- COMMAND..."
[[ -n $dir && -f $dir/pids ]] || die "no dev cluster folder: give DIR or set GPUACCEPT_DEV_CLUSTER"
pid=$(awk -v n="$node" '$1 == n {print $2}' "$dir/pids")
[[ -n $pid ]] || die "$node is not in $dir/pids"
cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || die "$node's slurmd (pid $pid) is not running"
[[ $cmd == *slurmd*"-N $node "* ]] || die "pid $pid is not $node's slurmd: $cmd"
[[ $(readlink "/proc/$pid/ns/mnt") != $(readlink /proc/self/ns/mnt) ]] ||
  die "$node shares this host's mount namespace: start the cluster with up.sh --own-mounts"
exec nsenter --target "$pid" --mount -- "$@"
