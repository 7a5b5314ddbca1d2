#!/usr/bin/env bash
# Build (or reuse) a root filesystem holding a newer Slurm than the host's, from Debian's own
# packages, for `up.sh --slurm VERSION`. Prints the root's path on stdout; progress goes to stderr.
#
#   slurm/dev-cluster/chroot.sh 24.11     # Debian trixie's slurm-wlm (24.11.x)
#   slurm/dev-cluster/chroot.sh 26.05     # Debian sid's slurm-wlm (26.05.x)
#
# Why a separate root: trixie's and sid's Slurm need glibc >= 2.38 and the CI machine is bookworm
# (2.36). The root is made by debootstrap (fetched with apt-get download, not installed), then kept
# under $GPUACCEPT_SLURM_CACHE (default /var/cache/gpuaccept-slurm) and reused while it holds the
# version asked for. Needs patchelf. Nothing of the root is mounted at run time (see host-bin below).
set -euo pipefail
# shellcheck source=slurm/dev-cluster/debootstrap.sh
source "$(dirname "${BASH_SOURCE[0]}")/debootstrap.sh"

log() { printf 'chroot.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

version=${1:-}
case $version in
  24.11) suite=trixie ;;
  26.05) suite=sid ;;
  *) die "usage: chroot.sh 24.11|26.05 (the Slurm version; Debian trixie and sid ship them)" ;;
esac
((EUID == 0)) || die "must run as root (debootstrap)"
cache=${GPUACCEPT_SLURM_CACHE:-/var/cache/gpuaccept-slurm}
root=$cache/slurm-$version
marker=$root/.gpuaccept-slurm-version

# The root's Slurm runs on the host, not in a chroot: copies of its commands in ROOT/host-bin get the
# root's dynamic loader as ELF interpreter and the root's library folders as DT_RPATH (patchelf).
# DT_RPATH (not RUNPATH) of an executable also governs its libraries' own dependencies and the
# plugins it dlopens, and comes before LD_LIBRARY_PATH; nothing is put in the environment, so
# nothing of the root leaks into the tasks srun starts (they run on the host, with its python). Not
# `ld.so --library-path BINARY` wrappers: the daemons re-execute themselves through /proc/self/exe
# (slurmctld's slurmscriptd, 24.11's slurmstepd running a TaskProlog), which would be the loader.
COMMANDS_SBIN="slurmctld slurmd slurmstepd"
COMMANDS_BIN="srun salloc sbatch sinfo squeue scontrol scancel sdiag sacct"
make_host_bin() { # make_host_bin ROOT FINAL_ROOT
  command -v patchelf >/dev/null || die "patchelf is needed (apt-get install patchelf)"
  local rlib="$2/usr/lib/$(uname -m)-linux-gnu" b src
  rm -rf "$1/host-bin"
  mkdir -p "$1/host-bin"
  for b in $COMMANDS_SBIN $COMMANDS_BIN; do
    src=$1/usr/bin/$b
    [[ $COMMANDS_SBIN == *"$b"* ]] && src=$1/usr/sbin/$b-wlm  # usr/sbin/slurmd links to /etc/alternatives
    [[ -f $src ]] || die "$src missing from the root"
    cp "$src" "$1/host-bin/$b"
    patchelf --set-interpreter "$rlib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$rlib/slurm-wlm:$rlib" \
      "$1/host-bin/$b"
  done
}

if [[ -f $marker ]] && [[ $(cat "$marker") == "$version".* ]]; then
  [[ -x $root/host-bin/sacct ]] || make_host_bin "$root" "$root"
  log "reusing $root (Slurm $(cat "$marker"))"
  echo "$root"
  exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXX")
trap 'build_cleanup "$work"' EXIT
started=$SECONDS
build_root "$work" "$suite" slurm-wlm,slurm-client,munge

# (not `sinfo --version`: from 24.11 on it reads slurm.conf first and fails without one)
got=$(chroot "$work/root" dpkg-query -W -f '${Version}' slurm-client)
got=${got%%-*}
[[ $got == "$version".* ]] || die "Debian $suite now ships Slurm $got, not $version.x: update chroot.sh's table"
make_host_bin "$work/root" "$root"
echo "$got" >"$work/root/.gpuaccept-slurm-version"
rm -rf "$root"
mv "$work/root" "$root"
log "built $root (Slurm $got) in $((SECONDS - started)) s"
echo "$root"
