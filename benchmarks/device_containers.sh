#!/usr/bin/env bash
# Containers and device cgroups on a GPU machine (issue 37, items 8 and 9), in one call:
#
#   OUT=... bash benchmarks/device_containers.sh     # carry .cache/slurmdeb .cache/ocideb .whl
#   GPUACCEPT_CGROUPS=1 ... (3. alone: the first try, with 1 and 2, lost the machine: "stopped answering")
#
# 1. An OCI image made from the machine's own OS (its /usr and /etc copied, no Python packages), with the
#    NVIDIA driver's files taken out of it and bind-mounted from the host at run time, as NVIDIA's
#    container hooks (libnvidia-container) would: nothing here can install those hooks. The marker
#    /etc/gpuaccept-image.json is the proof a step ran inside. /usr/local (the driver, CUDA) and /opt (the
#    Python environment with torch) and this checkout are mounted, as the CI row mounts its packages.
# 2. One loopback node holding every GPU, oci.conf for runc (Debian's .deb, carried): the acceptance suite
#    without training on the hosts, then inside the image (srun --container), then each GPU's fine-tune
#    inside it; verdicts compared check by check (benchmarks/compare_verdicts.py).
# 3. Device cgroups: the same node with TaskPlugin=task/cgroup, ConstrainDevices=yes, IgnoreSystemd=yes
#    (up.sh --constrain-devices). If slurmd starts, a one-GPU task tries every GPU's device file and the
#    isolation test runs with the packaged limit (0 foreign GPUs openable); if not, the daemon's words.
# Everything lands in $OUT: containers.txt (the summary) and containers.tar.gz (records and logs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-reports/device}
work=$(mktemp -d /tmp/gpuaccept-containers.XXXX)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
summary=$out/containers.txt
say() { printf '%s\n' "$*" | tee -a "$summary"; }
t0=$(date +%s)
took() { echo "$(($(date +%s) - t0)) s"; }

python3 -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -n 2
mkdir -p /opt/oci
for f in .cache/ocideb/*.deb; do dpkg -x "$f" /opt/oci; done
export PATH=/opt/oci/usr/sbin:/opt/oci/usr/bin:$PATH
ngpu=$(nvidia-smi -L | wc -l)
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu_name:$ngpu" in
  *H100*:1) site=fixtures/site/h100-1gpu.yaml ;;
  *H100*) site=fixtures/site/h100-multi-gpu-no-ib.yaml ;;
  *H200*:1) site=fixtures/site/h200-1gpu.yaml ;;
  *) site=fixtures/site/h200-multi-gpu-no-ib.yaml ;;
esac
say "machine: $ngpu x $gpu_name, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1); $(runc --version | head -1); site $site"
say "cgroup: $(stat -fc %T /sys/fs/cgroup) at /sys/fs/cgroup; controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"

if [[ ${GPUACCEPT_CGROUPS:-0} != 1 ]]; then
# --- 1. the image ------------------------------------------------------------------------------------
bundle=$work/image/bundle
rootfs=$bundle/rootfs
mkdir -p "$rootfs"
tar -C / --exclude=./usr/local -cf - ./usr ./etc 2>/dev/null | tar -C "$rootfs" -xf -
for l in bin sbin lib lib64; do [[ -L /$l ]] && ln -s "$(readlink /$l)" "$rootfs/$l"; done
mkdir -p "$rootfs"/{proc,sys,dev,tmp,run,var/tmp,root,home,usr/local,opt,work}
# the driver's files: the libraries the loader knows by the driver's names, and its tools
mapfile -t driver_files < <(
  { ldconfig -p | awk '$1 ~ /^lib(cuda|nvidia-|nvcuvid|nvoptix)/ {print $NF}'; command -v nvidia-smi; } |
    xargs -r readlink -f | sort -u
)
say "driver files: ${driver_files[*]}"
say "python packages: $(python3 -c 'import torch, pynvml; print(torch.__file__, pynvml.__file__)' 2>&1)"
for f in "${driver_files[@]}"; do rm -f "$rootfs$f"; done
echo "{\"name\": \"gpuaccept-dev/host-os-no-driver\", \"built\": \"$(date -u +%FT%TZ)\"}" >"$rootfs/etc/gpuaccept-image.json"
python3 - "$bundle/config.json" "$PWD" "${driver_files[@]}" <<'PY'
import json, os, sys

path, repo, driver = sys.argv[1], sys.argv[2], sys.argv[3:]


def bind(src, dst=None, mode="rw"):
    return {"destination": dst or src, "type": "bind", "source": src, "options": ["rbind", mode]}


config = {
    "ociVersion": "1.0.2",
    "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "cwd": "/",
                # (Slurm replaces the command; run by hand, the image says what it is)
                "args": ["python3", "-c", "import torch, gpuaccept.probes.container as c; print(c.where(), torch.cuda.device_count())"],
                "env": [f"PATH={os.environ['PATH']}", f"PYTHONPATH={repo}"]},
    "root": {"path": "rootfs", "readonly": True},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, bind("/dev"), bind("/sys", mode="ro"),
               bind("/tmp"), bind("/usr/local", mode="ro"), bind("/opt", mode="ro"), bind(repo),
               bind("/etc/hosts", mode="ro"),
               *(bind(f, mode="ro") for f in driver)],
    # every device (runc's default rules leave /dev/nvidia* out: NVML "Can't initialize", torch sees 0 GPUs)
    "linux": {"namespaces": [{"type": "mount"}, {"type": "uts"}],
              "resources": {"devices": [{"allow": True, "access": "rwm"}]}},
}
json.dump(config, open(path, "w"), indent=1)
PY
say "image: $(du -sh "$rootfs" | cut -f1) in $(took); ${#driver_files[@]} driver files mounted from the host"
say "$(timeout 60 runc --root "$work/runc" run --bundle "$bundle" probe-once 2>&1 </dev/null | tail -n 3)"

# --- 2. the suite on the hosts and in the image ---------------------------------------------------------
suite() { # name pytest-args...
  local name=$1 t rc
  shift
  t=$(date +%s)
  python3 -m pytest -p no:cacheprovider --launcher slurm --nodes 1 --thresholds "$site" \
    --run-record "$work/$name.json" -rfE "$@" >"$work/$name.log" 2>&1
  rc=$?
  say "$name: exit $rc in $(($(date +%s) - t)) s: $(tail -n 1 "$work/$name.log")"
}
env=$(bash slurm/dev-cluster/up.sh --nodes 1 --gpus-per-node "$ngpu" --oci runc --prefix /opt/sl \
  --debs .cache/slurmdeb --dir "$work/cluster" 2>"$work/up.log") || { say "up.sh failed: $(tail -n 5 "$work/up.log")"; }
eval "$env"
suite host -m "acceptance and not training"
suite image -m "acceptance and not training" --container-bundle "$bundle"
say "$(python3 benchmarks/compare_verdicts.py "$work/host.json" "$work/image.json" | tail -n 12)"
suite image-finetune -m "acceptance and training" -k "each_gpu and default" --container-bundle "$bundle"
python3 - "$work"/image.json "$work"/image-finetune.json <<'PY' | tee -a "$summary"
import json, sys
for path in sys.argv[1:]:
    try:
        record = json.load(open(path))
    except OSError as exc:
        print(f"{path}: {exc}")
        continue
    places = sorted({w for t in record["tests"] for w in (t.get("ran_in") or {}).values()})
    print(f"{path.rsplit('/', 1)[-1]}: {record['verdict']}; ran in: {places}")
    print(f"  container: {json.dumps((record['cluster'].get('container') or {}).get('nodes'))[:600]}")
PY
bash slurm/dev-cluster/down.sh "$work/cluster" >/dev/null 2>&1
else
# --- 3. device cgroups ---------------------------------------------------------------------------------
if env=$(bash slurm/dev-cluster/up.sh --nodes 1 --gpus-per-node "$ngpu" --constrain-devices --prefix /opt/sl \
  --debs .cache/slurmdeb --dir "$work/cgroup" 2>"$work/up-cgroup.log"); then
  eval "$env"
  say "task/cgroup + ConstrainDevices: slurmd started"
  say "$(srun -N1 -n1 --gres=gpu:1 python3 -c '
import glob, os
for d in sorted(glob.glob("/dev/nvidia[0-9]*")):
    try:
        os.close(os.open(d, os.O_RDWR)); print(d, "opens")
    except OSError as exc:
        print(d, "refused:", exc.strerror)
print("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))' 2>&1 | tr '\n' ';')"
  python3 - "$site" "$work/site-cgroups.yaml" <<'PY'
import sys, yaml
data = yaml.safe_load(open(sys.argv[1]))
for sku in data.get("skus", {}).values():
    (sku.get("limits") or {}).pop("gpu_foreign_devices_openable", None)
yaml.safe_dump(data, open(sys.argv[2], "w"))
PY
  site=$work/site-cgroups.yaml suite cgroup-isolation -m acceptance -k "gpu_isolation or step_runs"
  grep -h "gpu_foreign_devices_openable" "$work/cgroup-isolation.log" | head -n 3 | tee -a "$summary"
  bash slurm/dev-cluster/down.sh "$work/cgroup" >/dev/null 2>&1
else
  say "task/cgroup + ConstrainDevices: slurmd did not start:"
  grep -hiE "error|fatal" "$work/up-cgroup.log" "$work/cgroup/log/"*.log 2>/dev/null | head -n 12 | tee -a "$summary"
fi
fi
say "total: $(took)"
tar -C "$work" -czf "$out/containers.tar.gz" --exclude=image --exclude='cluster/spool' --exclude='cgroup/spool' . 2>/dev/null
cat "$summary"
