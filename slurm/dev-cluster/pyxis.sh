#!/usr/bin/env bash
# Build (or reuse) NVIDIA enroot and NVIDIA pyxis for `up.sh --pyxis DIR`, so that the loopback dev
# cluster runs srun steps in containers (--container-image) as GPU clusters with pyxis do. Prints the
# install folder on stdout; progress goes to stderr.
#
#   slurm/dev-cluster/pyxis.sh --src SRCDIR [--dir DIR]
#   eval "$(slurm/dev-cluster/up.sh --nodes 2 --pyxis "$(slurm/dev-cluster/pyxis.sh --src SRCDIR)")"
#
# Sources: the project holds only its own code, and neither CI nor every user can reach GitHub, so
# the sources come from SRCDIR, which must hold the two release tags pinned below, each as a tarball
# (any compression tar reads) or an unpacked folder named
#   enroot-4.1.2[.tar.gz|.tar|...]   e.g. git -C enroot archive --prefix=enroot-4.1.2/ v4.1.2 -o SRCDIR/enroot-4.1.2.tar.gz
#   pyxis-0.24.0[.tar.gz|.tar|...]   e.g. git -C pyxis archive --prefix=pyxis-0.24.0/ v0.24.0 -o SRCDIR/pyxis-0.24.0.tar.gz
# from https://github.com/NVIDIA/enroot and https://github.com/NVIDIA/pyxis (GitHub's own "Source
# code" tarballs of the tags unpack the same way). git archive leaves out enroot's submodules
# (deps/musl, deps/makeself, deps/linux-headers): this build needs none of them (see below).
#
# Install folder (default /var/cache/gpuaccept-pyxis/<enroot>-<pyxis>, or --dir DIR):
#   bin/enroot, bin/enroot-*        enroot and its helpers (enroot's config: etc/enroot/enroot.conf)
#   lib/enroot, share/enroot        enroot's shell libraries, extra hooks
#   lib/slurm/spank_pyxis.so        the SPANK plugin (up.sh --pyxis writes the plugstack.conf)
#   BUILD-INFO                      versions; written last, so a folder without it is rebuilt
# enroot's paths are compiled into bin/enroot: the folder cannot be moved after the build.
#
# pyxis is compiled against the host's Slurm headers (spank.h from libslurm-dev) and Slurm loads a
# SPANK plugin only if it was built for the same Slurm release (major.minor): BUILD-INFO records the
# Slurm it was built for, and a folder built for another Slurm is rebuilt. On Debian bookworm that is
# 22.05 (libslurm-dev 22.05.8 matches slurm-wlm 22.05.8); up.sh --slurm 24.11/26.05 needs a pyxis
# built against those headers, which this script does not do.
set -euo pipefail

ENROOT_VERSION=4.1.2 # tag v4.1.2
PYXIS_VERSION=0.24.0 # tag v0.24.0

log() { printf 'pyxis.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
usage() {
  sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

src="" dir=""
while (($#)); do
  case $1 in
    --src) src=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done
((EUID == 0)) || die "must run as root (apt-get; the default folder is under /var/cache)"
dir=${dir:-/var/cache/gpuaccept-pyxis/$ENROOT_VERSION-$PYXIS_VERSION}
# The folder goes unquoted into plugstack.conf and enroot's compiled-in paths: keep it plain.
[[ $dir =~ ^[A-Za-z0-9_./+-]+$ ]] || die "path '$dir' must only hold letters, digits and _ . / + -"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# --- build dependencies ---------------------------------------------------------------------------
# libslurm-dev: spank.h of the host's Slurm. libbsd-dev/libmd-dev: strlcpy/strlcat (see the enroot
# build). The rest is what enroot runs: squashfs and overlay mounts, layer tools, parallel, jq.
pkgs=(gcc make libslurm-dev libbsd-dev libmd-dev makeself squashfs-tools squashfuse fuse-overlayfs
  jq parallel zstd pigz curl libcap2-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed"
fi

# The Slurm the plugin is built for: the headers' version, which must be the daemons' release.
slurm_hdr=/usr/include/slurm/slurm_version.h
hex=$(awk '$2 == "SLURM_VERSION_NUMBER" {print $3}' "$slurm_hdr")
[[ -n $hex ]] || die "no SLURM_VERSION_NUMBER in $slurm_hdr"
slurm_version=$((hex >> 16)).$(printf '%02d' $(((hex >> 8) & 255))).$((hex & 255))
slurmd_version=$(slurmd -V 2>/dev/null | awk '{print $2}') || true
if [[ -n $slurmd_version && ${slurmd_version%.*} != "${slurm_version%.*}" ]]; then
  log "warning: headers are Slurm $slurm_version but slurmd is $slurmd_version: the plugin will not load in it"
fi

info=$dir/BUILD-INFO
if [[ -f $info ]] && grep -qxF "slurm=$slurm_version" "$info" && [[ -x $dir/bin/enroot && -f $dir/lib/slurm/spank_pyxis.so ]]; then
  log "reusing $dir (enroot $ENROOT_VERSION, pyxis $PYXIS_VERSION, Slurm $slurm_version)"
  echo "$dir"
  exit 0
fi

[[ -n $src ]] || die "no build in $dir yet: give --src SRCDIR with enroot-$ENROOT_VERSION and pyxis-$PYXIS_VERSION"
[[ -d $src ]] || die "--src $src is not a folder"

work=$(mktemp -d /tmp/gpuaccept-pyxis-build.XXXX)
trap 'rm -rf "$work"' EXIT
started=$SECONDS

unpack() { # unpack NAME: SRCDIR/NAME (folder) or SRCDIR/NAME.tar* into $work/NAME
  local name=$1 f
  if [[ -d $src/$name ]]; then
    cp -a "$src/$name" "$work/$name"
    return
  fi
  for f in "$src/$name".tar*; do
    [[ -f $f ]] || continue
    mkdir -p "$work/$name"
    tar -xf "$f" -C "$work/$name" --strip-components=1 || die "cannot unpack $f"
    return
  done
  die "neither $src/$name/ nor $src/$name.tar* found"
}
unpack "enroot-$ENROOT_VERSION"
unpack "pyxis-$PYXIS_VERSION"
# A tarball of another tag under the pinned name would build something else than BUILD-INFO says.
grep -qE "^VERSION +:= $ENROOT_VERSION\$" "$work/enroot-$ENROOT_VERSION/Makefile" ||
  die "$src/enroot-$ENROOT_VERSION is not enroot $ENROOT_VERSION (its Makefile's VERSION differs)"
grep -qE "^PYXIS_VER +\?= $PYXIS_VERSION\$" "$work/pyxis-$PYXIS_VERSION/Makefile" ||
  die "$src/pyxis-$PYXIS_VERSION is not pyxis $PYXIS_VERSION (its Makefile's PYXIS_VER differs)"

# Whatever an earlier, unfinished build left: the folder is only trusted once BUILD-INFO is in it.
# Never clear a folder that is not one of ours (a mistyped --dir).
if [[ ! -e $info && ! -e $dir/bin/enroot && -n $(ls -A "$dir") ]]; then
  die "$dir is not empty and holds no earlier build: give an empty or new --dir"
fi
rm -f "$info"
rm -rf "${dir:?}"/{bin,lib,etc,share}

# --- enroot ---------------------------------------------------------------------------------------
# enroot's release build links its helpers statically against musl (submodule deps/musl) with the
# kernel headers of deps/linux-headers and ships makeself from deps/makeself. None of it is needed:
# - FORCE_GLIBC=1 builds the helpers with the host's gcc and glibc (dynamically linked; they only
#   run on this host);
# - glibc's build takes the kernel headers from /usr/include (linux-libc-dev), so deps/linux-headers
#   is replaced by an empty include folder;
# - makeself (only for `enroot bundle`) is Debian's, the same 2.4.5 that deps/Makefile pins.
# The stamps tell deps/Makefile those two are done; `git submodule update` fails (no .git) and the
# Makefile ignores that. The one thing musl gave that bookworm's glibc (2.36) lacks is strlcpy and
# strlcat (glibc has them from 2.38): without them the link fails "undefined reference to `strlcpy'"
# in enroot-mount and enroot-switchroot. Debian's static libbsd (with libmd, which it needs) supplies
# them after enroot's own vendored libbsd subset, so the helpers still need only libc at run time.
e=$work/enroot-$ENROOT_VERSION
mkdir -p "$e/deps/dist/makeself/bin" "$e/deps/dist/linux/include"
cp /usr/bin/makeself "$e/deps/dist/makeself/bin/enroot-makeself"
touch "$e/deps/makeself/.stamp" "$e/deps/linux-headers/.stamp"
multiarch="$(uname -m)-linux-gnu"
log "building enroot $ENROOT_VERSION into $dir"
make -C "$e" -j"$(nproc)" FORCE_GLIBC=1 prefix="$dir" \
  LDLIBS="-l:libbsd.a /usr/lib/$multiarch/libbsd.a /usr/lib/$multiarch/libmd.a" \
  install >"$work/enroot.log" 2>&1 || {
  grep -v 'warning' "$work/enroot.log" | tail -n 20 >&2
  die "enroot build failed (log above)"
}
enroot_took=$((SECONDS - started))

# --- pyxis ----------------------------------------------------------------------------------------
log "building pyxis $PYXIS_VERSION against Slurm $slurm_version's spank.h"
t=$SECONDS
make -C "$work/pyxis-$PYXIS_VERSION" -j"$(nproc)" prefix="$dir" install >"$work/pyxis.log" 2>&1 || {
  tail -n 20 "$work/pyxis.log" >&2
  die "pyxis build failed (log above)"
}
pyxis_took=$((SECONDS - t))
# pyxis's own share/pyxis/pyxis.conf is a plugstack line without options; up.sh writes its own.
[[ -f $dir/lib/slurm/spank_pyxis.so && -x $dir/bin/enroot ]] || die "build finished without bin/enroot or spank_pyxis.so"

cat >"$info" <<EOF
enroot=$ENROOT_VERSION
pyxis=$PYXIS_VERSION
slurm=$slurm_version
built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(sed -n 's/^PRETTY_NAME="\(.*\)"$/\1/p' /etc/os-release), gcc $(gcc -dumpversion)
seconds=enroot $enroot_took, pyxis $pyxis_took
EOF
log "built enroot $ENROOT_VERSION and pyxis $PYXIS_VERSION (Slurm $slurm_version) in $((SECONDS - started)) s"
echo "$dir"
