#!/usr/bin/env bash
# The storage and tenant-safety sections on a GPU host (docs/measurements.md 'GPU VMs, 2026-11-28: storage and
# tenant safety'). Carry .cache/slurmdeb, .cache/fio (fio 3.33 built from source: the image has none) and .whl.
#
#   OUT=... bash benchmarks/device_storage_tenant.sh probe CONTRACT
#       fio by hand on the local disk (the job the fio probe runs), the storage section through Slurm against
#       CONTRACT (a preset's name or a YAML file), the residue probe by hand, the neighbours probe by hand three
#       times and once with benchmarks/neighbour.py pressing on GPU 0 during the halves' together phase
#   OUT=... bash benchmarks/device_storage_tenant.sh suite CONTRACT [runs]
#       the whole suite through Slurm (benchmarks/device_suite.sh) with the host's site file, storage and tenant
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:?probe or suite}
contract=${2:?a preset name or a contract YAML}
out=${OUT:-reports/device}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
note() { printf '%s\n' "$*" | tee -a "$out/summary.txt"; }
python3 -c "import pydantic, allure" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .whl/*.whl
command -v fio >/dev/null || install -m 755 .cache/fio/fio /usr/local/bin/fio
disk=/var/tmp/gpuaccept-storage
mkdir -p "$disk"
ngpu=$(nvidia-smi -L | wc -l)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu_name:$ngpu" in
  *H100*:1) base=fixtures/site/h100-1gpu.yaml ;;
  *H100*) base=fixtures/site/h100-multi-gpu-no-ib.yaml ;;
  *H200*:1) base=fixtures/site/h200-1gpu.yaml ;;
  *) base=fixtures/site/h200-multi-gpu-no-ib.yaml ;;
esac
python3 benchmarks/device_site.py "$base" --contract "$contract" --path "$disk" >"$out/site.yaml" || exit 1
note "$(date -u +%FT%TZ) $mode on $(hostname): $ngpu x $gpu_name, $(nproc) CPUs; $(fio --version); $(df -h "$disk" | tail -1)"

if [[ $mode == suite ]]; then
  GPUACCEPT_SITE=$out/site.yaml GPUACCEPT_MULTINODE=0 bash benchmarks/device_suite.sh "${3:-1}"
  exit 0
fi

# 1. fio by hand, the probe's job (4 jobs x 1 GiB, 1 MiB direct, fsync at the end; then the read), three times
for i in 1 2 3; do
  for rw in write read; do
    extra=()
    [[ $rw == write ]] && extra=(--end_fsync=1)
    (cd "$disk" && fio --output-format=json --name=gpuaccept-fio --directory="$disk" '--filename_format=gpuaccept-fio.$jobnum.0' \
      --rw=$rw --bs=1024k --size=1073741824 --numjobs=4 --ioengine=psync --direct=1 --invalidate=1 --group_reporting \
      --runtime=60 "${extra[@]}") >"$out/fio-hand-$rw-$i.json" 2>&1
    note "fio by hand $rw $i: $(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0][sys.argv[2]]; print(round(j['io_bytes']/j['runtime']/1e6, 3), 'GB/s')" "$out/fio-hand-$rw-$i.json" "$rw")"
  done
done
rm -f "$disk"/gpuaccept-fio.*

# 2. the storage section through Slurm (one loopback node holding every GPU)
GPUACCEPT_SITE=$out/site.yaml GPUACCEPT_MARK="acceptance and storage" GPUACCEPT_MULTINODE=0 \
  GPUACCEPT_RUN_NAME=storage bash benchmarks/device_suite.sh 1 >"$out/storage-suite.txt" 2>&1
python3 - "$out/storage1.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
record = json.load(open(sys.argv[1]))
for m in record["metrics"]:
    if m["metric"].startswith(("storage_", "checkpoint_", "scratch_")) and m["metric"] != "storage_path_usable":
        extra = m.get("extra") or {}
        print(f"{m['metric']:<28} {m['node']} {m['value']} {m['verdict']} {extra.get('cache', '')} {extra.get('shape', '')} {extra.get('phase', '')}")
for t in record["tests"]:
    print(t["nodeid"].split("::")[-1], t["verdict"], t.get("duration_s"))
PY

# 3. the residue probe by hand: fill, the next process's scan, a planted pattern
for step in "fill 7" "scan 7" "plant 8"; do
  set -- $step
  t0=$SECONDS
  python3 -m gpuaccept.probes.residue --mode "$1" --seed "$2" >"$out/residue-$1.out" 2>"$out/residue-$1.err"
  note "residue $1: exit $?, $((SECONDS - t0)) s"
done

# 4. neighbours by hand, three times, then with a neighbour on GPU 0 during the together phase
if ((ngpu >= 2)); then
  for i in 1 2 3; do
    t0=$SECONDS
    python3 -m gpuaccept.probes.neighbours --seconds 3 >"$out/neighbours-$i.out" 2>"$out/neighbours-$i.err"
    note "neighbours $i: exit $?, $((SECONDS - t0)) s"
  done
  python3 -m gpuaccept.probes.neighbours --seconds 3 >"$out/neighbours-pressed.out" 2>"$out/neighbours-pressed.err" &
  probe=$!
  for _ in $(seq 1 600); do
    ls -d "${TMPDIR:-/tmp}"/gpuaccept-neighbours-*/together >/dev/null 2>&1 && break
    sleep 0.2
  done
  python3 benchmarks/neighbour.py --gpu 0 --mode sm --seconds 40 >"$out/neighbour-sm.log" 2>&1 &
  wait $probe
  note "neighbours with a neighbour on GPU 0: exit $?"
  kill %2 2>/dev/null
fi
tar -czf "$out/all.tar.gz" -C "$out" --exclude=all.tar.gz --exclude=summary.txt . 2>/dev/null
find "$out" -mindepth 1 -maxdepth 1 ! -name all.tar.gz ! -name summary.txt ! -name site.yaml -exec rm -rf {} +
