#!/usr/bin/env bash
# Simulate a node dying: SIGKILL that node's slurmd only (its running slurmstepd are left as a
# crashed daemon would leave them). slurmctld notices after SlurmdTimeout (30 s) and marks it DOWN.
#
#   slurm/dev-cluster/kill-node.sh NODE [DIR]     # DIR defaults to $GPUACCEPT_DEV_CLUSTER
set -euo pipefail

log() { printf 'kill-node.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

node=${1:-}
dir=${2:-${GPUACCEPT_DEV_CLUSTER:-}}
[[ -n $node && $node != slurmctld ]] || die "usage: kill-node.sh NODE [DIR]"
[[ -n $dir && -f $dir/pids ]] || die "no dev cluster folder: give DIR or set GPUACCEPT_DEV_CLUSTER"
dir=$(cd "$dir" && pwd)

pid=$(awk -v n="$node" '$1 == n {print $2}' "$dir/pids")
[[ -n $pid ]] || die "$node is not in $dir/pids"
# Only kill it if the pid is still that slurmd of this cluster (pids get reused).
cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || die "$node's slurmd (pid $pid) is not running"
[[ $cmd == *slurmd*"$dir/slurm.conf"*"-N $node "* ]] || die "pid $pid is not $node's slurmd: $cmd"

kill -KILL "$pid"
# Gone once its cmdline is empty (a zombie has none; some container inits never reap).
for ((i = 0; i < 100; i++)); do
  [[ -n $(tr -d '\0' 2>/dev/null <"/proc/$pid/cmdline") ]] || break
  sleep 0.05
done
log "killed $node's slurmd (pid $pid)"
