# shellcheck shell=bash
# Sourced by chroot.sh and image.sh: a Debian root made by debootstrap in a build folder, from the
# mirror apt already uses, with debootstrap fetched (apt-get download) and unpacked, not installed.
# The caller defines log and die, and removes its build folder with build_cleanup (an EXIT trap).
#
#   build_root WORK SUITE INCLUDE    # -> WORK/root; WORK/debootstrap.log; its proc and sys unmounted

# The mirror apt already uses on this machine (deb822 or one-line sources), else Debian's CDN.
debian_mirror() {
  local mirror
  mirror=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${mirror:-http://deb.debian.org/debian}"
}

# debootstrap mounts proc and sys inside the root while it installs: whatever happens, unmount
# anything still mounted under the build folder before removing it (deepest first).
unmount_under() {
  awk -v r="$1/" 'index($2 "/", r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" || log "warning: could not unmount $m"
  done
}

build_cleanup() { # build_cleanup WORK
  unmount_under "$1"
  rm -rf --one-file-system "$1"
}

build_root() { # build_root WORK SUITE INCLUDE
  local work=$1 suite=$2 include=$3 mirror
  mirror=$(debian_mirror)
  log "fetching debootstrap (not installed: unpacked under $work)"
  (cd "$work" && apt-get download -q debootstrap >/dev/null 2>&1) || die "apt-get download debootstrap failed"
  dpkg -x "$work"/debootstrap_*.deb "$work/dbs"
  log "debootstrap $suite (+ $include) from $mirror into $work/root (a few minutes)"
  DEBOOTSTRAP_DIR=$work/dbs/usr/share/debootstrap "$work/dbs/usr/sbin/debootstrap" \
    --variant=minbase --include="$include" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 20 "$work/debootstrap.log" >&2
    die "debootstrap $suite failed (log above)"
  }
  unmount_under "$work"
  rm -rf "$work/root/var/cache/apt/archives/"*.deb
}
