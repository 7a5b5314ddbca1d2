#!/usr/bin/env bash
# Submit slurm/revalidate.sbatch once for each idle node whose last revalidation is older than
# GPUACCEPT_REVALIDATE_HOURS (default 24) and that has no revalidation job pending or running.
# Run it from the repository root by scrontab or cron (docs/gate.md has both):
#
#   slurm/revalidate-idle.sh [--partition P] [--qos Q] [--hours H] [--max N] [--dry-run] [-- PYTEST ARGS]
#
# Low priority: every job is --nice=10000 (the sbatch script), with --qos Q when given (e.g. a
# preemptible "scavenger" QOS), so a real job that wants the node starts first or preempts it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

partition="" qos="" hours=${GPUACCEPT_REVALIDATE_HOURS:-24} max=4 dry=0
while (($#)); do
  case $1 in
    --partition) partition=${2:?}; shift 2 ;;
    --qos) qos=${2:?}; shift 2 ;;
    --hours) hours=${2:?}; shift 2 ;;
    --max) max=${2:?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    *) echo "revalidate-idle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $hours =~ ^[0-9]+$ && $max =~ ^[0-9]+$ ]] || { echo "revalidate-idle.sh: --hours and --max take integers" >&2; exit 2; }

history=${GPUACCEPT_HISTORY:-reports/history}
mkdir -p "$history"
# nodes with a revalidation pending or running (one job per node: never pile them up)
busy=$(squeue -h -n gpuaccept-revalidate -o "%N %n" | tr ' ,' '\n\n')
idle=$(sinfo -h -N -t idle -o "%N" ${partition:+-p "$partition"} | sort -u)
submitted=0
for node in $idle; do
  ((submitted < max)) || break
  grep -qxF "$node" <<<"$busy" && continue
  newest=$(find "$history/$node" -maxdepth 1 -name "*.json" -mmin "-$((hours * 60))" 2>/dev/null | head -n 1 || true)
  [[ -z $newest ]] || continue
  argv=(sbatch --parsable --nodelist="$node" ${partition:+--partition="$partition"} ${qos:+--qos="$qos"} slurm/revalidate.sbatch "$@")
  if ((dry)); then
    echo "would run: ${argv[*]}"
  else
    echo "$node: job $("${argv[@]}")"
  fi
  submitted=$((submitted + 1))
done
echo "revalidate-idle.sh: $submitted node(s) submitted ($(wc -w <<<"$idle") idle)" >&2
