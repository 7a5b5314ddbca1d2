#!/usr/bin/env bash
# Build (or reuse) the image the container rows run the suite in: a Debian bookworm root with python3
# (3.11, as CI's Python) and fio (the storage probe's tool), and a marker file baked in as proof that a step
# ran inside it. Prints the image folder on stdout; progress goes to stderr.
#
#   slurm/dev-cluster/image.sh                      # -> /var/cache/gpuaccept-image/bookworm-py3
#   slurm/dev-cluster/image.sh --mount /work/main --mount /root/.pyenv/versions/3.11.7/lib/python3.11/site-packages \
#       --env PYTHONPATH=/work/main:/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages
#   slurm/dev-cluster/image.sh --squashfs           # also IMAGE/image.sqsh, for enroot (pyxis)
#
# The folder holds:
#   rootfs/                  the root (debootstrap --variant=minbase, python3, fio): built once, cached
#   bundle/config.json       an OCI runtime bundle for Slurm's `srun --container=IMAGE/bundle` (runc);
#   bundle/rootfs/           Slurm 22.05 takes the root from BUNDLE/rootfs whatever config.json says, and
#                            runc refuses a symlink there: the root itself lives at bundle/rootfs and
#                            IMAGE/rootfs is the symlink
#   image.sqsh               (--squashfs) the same root squashed, for enroot/pyxis --container-image
#
# The suite is not installed in the image: it and its packages come in through bind mounts at the same
# paths as on the host (--mount SRC[:DST[:ro]], read-write unless :ro, written into bundle/config.json), with PYTHONPATH pointing at them
# (--env). An editable install's .pth file is not read from PYTHONPATH, so mount the checkout itself
# (gpuaccept/ sits at its top) or a plain install. config.json is written anew on every call; the root
# is rebuilt only when missing or built by another version of this script.
#
# What the bundle shares with the host, as enroot does: the network (probes rendezvous over TCP, NCCL
# over the host's interfaces), /dev (GPUs, /dev/shm, /dev/infiniband; no device rules of its own: device
# isolation is Slurm's task/cgroup's job, outside the container), /sys, /tmp. It has its own mount and
# UTS namespaces (Slurm sets the container's hostname, which runc refuses without one).
set -euo pipefail
# shellcheck source=slurm/dev-cluster/debootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/debootstrap.sh"

log() { printf 'image.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

#: bump when the root's recipe changes: a cached root of another version is rebuilt
RECIPE=2
NAME=bookworm-py3
cache=${GPUACCEPT_IMAGE_CACHE:-/var/cache/gpuaccept-image}
mounts=() envs=() squash=0
while (($#)); do
  case $1 in
    --mount) mounts+=("${2:?--mount needs SRC[:DST[:ro]]}"); shift 2 ;;
    --env) envs+=("${2:?--env needs NAME=VALUE}"); shift 2 ;;
    --squashfs) squash=1; shift ;;
    --cache) cache=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,28p' "$0" >&2; exit 2 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
((EUID == 0)) || die "must run as root (debootstrap)"
for m in "${mounts[@]}"; do
  src=${m%%:*}
  [[ -e $src ]] || die "--mount $m: $src does not exist"
done
for e in "${envs[@]}"; do
  [[ $e == [A-Za-z_]*=* ]] || die "--env $e: not NAME=VALUE"
done

image=$cache/$NAME
root=$image/bundle/rootfs
marker=$root/etc/gpuaccept-image.json
started=$SECONDS

if [[ -f $marker ]] && grep -q "\"recipe\": $RECIPE," "$marker"; then
  log "reusing $root"
else
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/build.XXXX")
  trap 'build_cleanup "$work"' EXIT
  build_root "$work" bookworm python3,fio
  rm -rf "$work/root/var/lib/apt/lists/"*
  python=$(chroot "$work/root" python3 -c 'import platform; print(platform.python_version())')
  fio=$(chroot "$work/root" fio --version) || die "fio does not run in the new root"
  # The proof a step ran in this image: probes report this file's content (gpuaccept/probes/container.py).
  cat >"$work/root/etc/gpuaccept-image.json" <<EOF
{"name": "gpuaccept-dev/$NAME", "recipe": $RECIPE, "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "python": "$python"}
EOF
  rm -rf "$image"
  mkdir -p "$image/bundle"
  mv "$work/root" "$root"
  ln -sfn bundle/rootfs "$image/rootfs"
  log "built $root (Python $python, $fio) in $((SECONDS - started)) s"
fi

# --- the OCI bundle's config.json (runc's spec, then what Slurm and the probes need) ----------------
python3 - "$image/bundle/config.json" "${#mounts[@]}" "${mounts[@]}" "${envs[@]}" <<'PY'
import json, sys

path, count = sys.argv[1], int(sys.argv[2])
mounts, envs = sys.argv[3 : 3 + count], sys.argv[3 + count :]


def bind(src: str, dst: str, *options: str) -> dict:
    return {"destination": dst, "type": "bind", "source": src, "options": ["rbind", *options]}


def mount(spec: str) -> tuple[str, ...]:
    """SRC[:DST[:ro]] -> (src, dst, rw|ro): read-write unless asked (the shared-filesystem test writes)."""
    src, dst, mode = (spec.split(":") + ["", ""])[:3]
    return src, dst or src, mode or "rw"


config = {
    "ociVersion": "1.0.2",
    "process": {
        "terminal": False,
        "user": {"uid": 0, "gid": 0},
        "args": ["python3"],  # Slurm replaces it with the task's command
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *envs],
        "cwd": "/",
        "noNewPrivileges": False,
    },
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "gpuaccept",
    "mounts": [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        bind("/dev", "/dev", "rw"),
        bind("/sys", "/sys", "ro"),
        bind("/tmp", "/tmp", "rw"),
        bind("/etc/hosts", "/etc/hosts", "ro"),
        bind("/etc/resolv.conf", "/etc/resolv.conf", "ro"),
        *(bind(*mount(m)) for m in mounts),
    ],
    # the host's network and PIDs (as enroot): a mount namespace, and a UTS one for Slurm's hostname;
    # every device of the bound /dev: runc's default device rules leave /dev/nvidia* out (seen on 2 x
    # H100 80GB HBM3, 2026-11-26: NVML "Can't initialize", torch saw 0 GPUs); confining a task to its GPUs is task/cgroup's job
    "linux": {
        "namespaces": [{"type": "mount"}, {"type": "uts"}],
        "resources": {"devices": [{"allow": True, "access": "rwm"}]},
    },
}
with open(path, "w") as fh:
    json.dump(config, fh, indent=1)
PY
log "wrote $image/bundle/config.json (${#mounts[@]} mounts)"

if ((squash)); then
  command -v mksquashfs >/dev/null || die "mksquashfs missing (apt-get install squashfs-tools)"
  if [[ ! -f $image/image.sqsh || $marker -nt $image/image.sqsh ]]; then
    rm -f "$image/image.sqsh"
    mksquashfs "$root" "$image/image.sqsh" -quiet -noappend -comp zstd >&2
    log "squashed $image/image.sqsh ($(du -h "$image/image.sqsh" | cut -f1))"
  fi
fi
echo "$image"
