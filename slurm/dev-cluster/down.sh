#!/usr/bin/env bash
# Stop a dev cluster started by up.sh: cancel its jobs, then stop exactly the daemons listed in
# DIR/pids (TERM, wait, KILL). Keeps DIR and its logs unless --clean.
#
#   slurm/dev-cluster/down.sh [--clean] [DIR]     # DIR defaults to $GPUACCEPT_DEV_CLUSTER
set -euo pipefail

log() { printf 'down.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

clean=0 dir=""
while (($#)); do
  case $1 in
    --clean) clean=1; shift ;;
    -h | --help) echo "usage: down.sh [--clean] [DIR]" >&2; exit 2 ;;
    *) dir=$1; shift ;;
  esac
done
dir=${dir:-${GPUACCEPT_DEV_CLUSTER:-}}
[[ -n $dir ]] || die "no cluster folder: give DIR or set GPUACCEPT_DEV_CLUSTER"
[[ -f $dir/slurm.conf && -f $dir/pids ]] || die "$dir is not a dev cluster folder (no slurm.conf/pids)"
dir=$(cd "$dir" && pwd)

# The cluster's own client environment (SLURM_CONF, and PATH/LD_LIBRARY_PATH for a --prefix one);
# up.sh writes env only once the cluster is up, so fall back to the config path.
if [[ -f $dir/env ]]; then
  # shellcheck source=/dev/null
  source "$dir/env"
else
  export SLURM_CONF=$dir/slurm.conf
fi

# alive_ours NAME PID: the pid is still this cluster's daemon (guards against pid reuse).
alive_ours() {
  local want=slurmd cmd
  [[ $1 == slurmctld ]] && want=slurmctld
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$2/cmdline") || return 1
  [[ $cmd == *"$want"* && $cmd == *"$dir/slurm.conf"* ]]
}

# A node whose slurmd is already gone (kill-node.sh): its jobs stay COMPLETING until SlurmdTimeout marks
# it DOWN, so waiting for them to leave squeue only waits out the 10 s below; then only jobs still
# pending or running are waited for (the gone node's slurmstepd and tasks are killed as strays below).
waitfor=""
while read -r name pid; do
  [[ $name != slurmctld ]] && ! alive_ours "$name" "$pid" && waitfor="-t PENDING,RUNNING,SUSPENDED,CONFIGURING"
done <"$dir/pids"

# Cancel jobs first so steps end through Slurm (their tasks get killed by slurmstepd).
if command -v scontrol >/dev/null && timeout 5 scontrol ping 2>/dev/null | grep -q UP; then
  mapfile -t jobs < <(timeout 10 squeue -h -o %i 2>/dev/null || true)
  if ((${#jobs[@]})); then
    log "cancelling jobs: ${jobs[*]}"
    timeout 10 scancel "${jobs[@]}" || true
    # Up to 10 s for them to end through Slurm
    for ((i = 0; i < 20; i++)); do
      # shellcheck disable=SC2086 # $waitfor: no words, or the option and its list
      [[ -z $(timeout 5 squeue -h $waitfor -o %i 2>/dev/null || true) ]] && break
      sleep 0.5
    done
  fi
fi

# Nodes first (reverse order), controller last.
mapfile -t entries < <(tac "$dir/pids")
victims=()
for entry in "${entries[@]}"; do
  read -r name pid <<<"$entry"
  if alive_ours "$name" "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    victims+=("$name:$pid")
  fi
done
for ((i = 0; i < 100; i++)); do
  left=()
  for v in "${victims[@]}"; do alive_ours "${v%%:*}" "${v##*:}" && left+=("$v"); done
  ((${#left[@]})) || break
  sleep 0.1
done
for v in "${left[@]}"; do
  log "${v%%:*} (pid ${v##*:}) ignored TERM for 10 s: KILL"
  kill -KILL "${v##*:}" 2>/dev/null || true
done

# slurmstepd of a node whose slurmd was killed (kill-node.sh) outlive it, and so do their tasks.
# The stepds carry GPUACCEPT_DEV_CLUSTER=DIR from their slurmd, so only this cluster's are found;
# their tasks are found as their descendants (collected before anything is killed).
strays=()
for p in /proc/[0-9]*; do
  [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd* ]] || continue
  grep -qzxF "GPUACCEPT_DEV_CLUSTER=$dir" "$p/environ" 2>/dev/null || continue
  strays+=("${p#/proc/}")
done
if ((${#strays[@]})); then
  declare -A kids=()
  for s in /proc/[0-9]*/stat; do
    { read -r line <"$s"; } 2>/dev/null || continue
    read -r _ ppid _ <<<"${line##*) }" # fields after "(comm) ": state ppid ...
    pid=${s#/proc/}
    kids[$ppid]+=" ${pid%/stat}"
  done
  tree=() queue=("${strays[@]}")
  while ((${#queue[@]})); do
    pid=${queue[0]}
    queue=("${queue[@]:1}")
    tree+=("$pid")
    read -ra more <<<"${kids[$pid]:-}"
    queue+=("${more[@]}")
  done
  log "killing stray slurmstepd and their tasks: ${tree[*]}"
  kill -KILL "${tree[@]}" 2>/dev/null || true
fi

# switch/nvidia_imex (up.sh --imex): slurmd makes the step's channel file in the host's
# /dev/nvidia-caps-imex-channels and leaves the folder behind (seen on 26.05.5). Only a cluster of ours made it
# (this host has no NVIDIA IMEX driver: up.sh gave the plugin a major nothing holds), so remove it, its files
# being only character devices of that major.
if grep -qx 'SwitchType=switch/nvidia_imex' "$dir/slurm.conf" 2>/dev/null; then
  major=$(sed -n 's/^SwitchParameters=.*imex_dev_major=\([0-9]*\).*/\1/p' "$dir/slurm.conf")
  channels=/dev/nvidia-caps-imex-channels
  if [[ -n $major && -d $channels ]] && ! grep -q ' nvidia-caps-imex-channels$' /proc/devices; then
    for f in "$channels"/*; do
      [[ -e $f ]] || continue
      [[ -c $f && $(stat -c '%t' "$f") == $(printf '%x' "$major") ]] && rm -f "$f"
    done
    rmdir "$channels" 2>/dev/null && log "removed $channels" || log "left $channels (it holds other files)"
  fi
fi

log "stopped ${#victims[@]} daemons of $dir"
if ((clean)); then
  rm -rf "$dir"
  log "removed $dir"
fi
