#!/usr/bin/env bash
# Fleet agreement of fine-tunes on one GPU host, in one command (what a one-GPU machine can show):
#   1. the training section 3 times, healthy, through a loopback Slurm node holding every GPU, runs 2
#      and 3 with --baseline run 1 (so the suite itself judges each GPU's curve against run 1's);
#   2. the 3 trajectories of each GPU compared bit for bit (benchmarks/train_agreement_table.py);
#   3. one more run with the test hook GPUACCEPT_TEST_PERTURB_TRAINING on GPU 0 (GPU 1 on a multi-GPU
#      host, GPU 0 left clean; one bf16 ulp in one weight after step 10), with the compute and GPU-health tests beside it, judged with --baseline
#      against run 1: the fine-tune agreement test must FAIL naming GPU 0 and the step; matmul and the
#      health checks must still pass;
#   4. a table: run, verdicts, final loss, eval loss, steps to target, tokens/s, wall s, what the
#      perturbed run named.
#
#   bash benchmarks/train_agreement.sh                      # on the GPU host (about 4 minutes on one H100)
#   GPUACCEPT_LAUNCHER=local bash benchmarks/train_agreement.sh   # the same logic without Slurm (CPU: gloo ranks)
#
# Overrides: OUT (default reports/train-agreement), GPUACCEPT_RUNS (3), GPUACCEPT_SITE (by GPU name:
# fixtures/site/h100-1gpu.yaml, h200-1gpu.yaml (one H200) or h200-multi-gpu-no-ib.yaml (several); none on CPU), GPUACCEPT_MARK ("acceptance and
# training"), GPUACCEPT_PERTURBED_MARK (adds compute and gpu_health), GPUACCEPT_PERTURB ("gpu=0,step=10";
# "gpu=1,step=10" with several GPUs; "rank=1,step=10" on a CPU node), GPUACCEPT_NODES (1), GPUACCEPT_LAUNCHER (slurm | local).
# Slurm comes from .debs under .cache/slurmdeb unpacked into /opt/sl when the host has none (as in
# benchmarks/device_suite.sh). Run records and logs go to $OUT; the table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-reports/train-agreement}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
runs=${GPUACCEPT_RUNS:-3}
nodes=${GPUACCEPT_NODES:-1}
launcher=${GPUACCEPT_LAUNCHER:-slurm}
mark=${GPUACCEPT_MARK:-acceptance and training}
perturbed_mark=${GPUACCEPT_PERTURBED_MARK:-acceptance and (training or compute or gpu_health)}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
case "$gpu_name" in
  *H100*) default_site=fixtures/site/h100-1gpu.yaml ;;
  *H200*) ((ngpu > 1)) && default_site=fixtures/site/h200-multi-gpu-no-ib.yaml || default_site=fixtures/site/h200-1gpu.yaml ;;
  *) default_site= ;;
esac
site=${GPUACCEPT_SITE-$default_site}
# one GPU: perturb it (judged against run 1); several: GPU 1, GPU 0 left clean; CPU: gloo rank 1
if ((ngpu >= 2)); then default_perturb=gpu=1,step=10; elif ((ngpu)); then default_perturb=gpu=0,step=10; else default_perturb=rank=1,step=10; fi
perturb=${GPUACCEPT_PERTURB:-$default_perturb}
args=(-p no:cacheprovider -rA --launcher "$launcher")
[[ -n $site ]] && args+=(--thresholds "$site")
[[ $launcher == slurm ]] && args+=(--nodes "$nodes")
started=$SECONDS
: >"$out/summary.txt"
note() { printf '%s\n' "$*" | tee -a "$out/summary.txt"; }
note "train_agreement on $(hostname): $ngpu GPU(s) ${gpu_name:-none}, $(nproc) CPUs, launcher $launcher, site ${site:-none}"

if [[ $launcher == slurm ]]; then
  slurm=()
  [[ -x /usr/sbin/slurmctld ]] || slurm=(--prefix /opt/sl --debs .cache/slurmdeb)
  gres=()
  ((ngpu)) && gres=(--gpus-per-node "$ngpu")
  env=$(bash slurm/dev-cluster/up.sh --nodes "$nodes" "${gres[@]}" "${slurm[@]}") || {
    note "loopback Slurm did not start"
    exit 1
  }
  eval "$env"
  trap 'bash slurm/dev-cluster/down.sh >/dev/null 2>&1' EXIT
fi

suite() { # name mark extra-args...
  local name=$1 m=$2 t0 rc
  shift 2
  t0=$SECONDS
  python3 -m pytest -m "$m" "${args[@]}" --run-record "$out/$name.json" "$@" >"$out/$name.log" 2>&1
  rc=$?
  note "$name: exit $rc, $((SECONDS - t0)) s: $(tail -n 1 "$out/$name.log")"
}

# run 1 alone (a GPU with no peer of its kind: the agreement test is not applicable), runs 2.. against
# run 1 (--baseline: each GPU must retrain run 1's curve bit for bit, and no figure may regress)
suite healthy1 "$mark"
for i in $(seq 2 "$runs"); do
  suite "healthy$i" "$mark" --baseline "$out/healthy1.json"
done
GPUACCEPT_TEST_PERTURB_TRAINING=$perturb suite perturbed "$perturbed_mark" --baseline "$out/healthy1.json"
grep -h "TEST HOOK" "$out/perturbed.log" | head -n 4 | tee -a "$out/summary.txt"

records=()
for i in $(seq 1 "$runs"); do records+=("$out/healthy$i.json"); done
python3 benchmarks/train_agreement_table.py "${records[@]}" --perturbed "$out/perturbed.json" | tee -a "$out/summary.txt"
note "wall $((SECONDS - started)) s"
