#!/usr/bin/env bash
# Restart the dev cluster's slurmctld the way a production controller restarts: SIGTERM (it saves its
# state), then start it again WITHOUT -c, so it recovers its jobs, steps and node states from
# StateSaveLocation (up.sh starts it with -c, which clears them). Running jobs and steps go on.
#
#   slurm/dev-cluster/restart-ctld.sh [DIR]     # DIR defaults to $GPUACCEPT_DEV_CLUSTER
set -euo pipefail

log() { printf 'restart-ctld.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

dir=${1:-${GPUACCEPT_DEV_CLUSTER:-}}
[[ -n $dir && -f $dir/pids && -f $dir/slurm.conf ]] || die "no dev cluster folder: give DIR or set GPUACCEPT_DEV_CLUSTER"
dir=$(cd "$dir" && pwd)
conf=$dir/slurm.conf
if [[ -f $dir/env ]]; then
  # shellcheck source=/dev/null
  source "$dir/env"
fi
export SLURM_CONF=$conf GPUACCEPT_DEV_CLUSTER=$dir
ours() { [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") == *slurmctld*"$conf"* ]]; }

pid=$(awk '$1 == "slurmctld" {print $2}' "$dir/pids")
[[ -n $pid ]] && ours "$pid" || die "slurmctld of $dir is not running"
# The binary it runs (the host's, or a --slurm/--prefix root's) is started again as it was.
exe=$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n 1)
kill -TERM "$pid"
for ((i = 0; i < 200; i++)); do
  ours "$pid" || break
  sleep 0.05
done
! ours "$pid" || die "slurmctld (pid $pid) did not stop within 10 s of SIGTERM"
rm -f "$dir/run/slurmctld.pid"
"$exe" -f "$conf" </dev/null >>"$dir/log/slurmctld.out" 2>&1 || die "slurmctld did not start again"
for ((i = 0; i < 100; i++)); do
  new=$(cat "$dir/run/slurmctld.pid" 2>/dev/null || true)
  [[ -n $new ]] && ours "$new" && break
  sleep 0.1
done
[[ -n ${new:-} ]] && ours "$new" || die "slurmctld wrote no pid file after the restart"
sed -i "s/^slurmctld $pid\$/slurmctld $new/" "$dir/pids"
for ((i = 0; i < 100; i++)); do
  scontrol ping 2>/dev/null | grep -q UP && break
  sleep 0.1
done
scontrol ping 2>/dev/null | grep -q UP || die "slurmctld (pid $new) does not answer after the restart"
log "slurmctld restarted with its state kept (pid $pid -> $new)"
