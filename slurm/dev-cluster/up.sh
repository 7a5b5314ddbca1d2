#!/usr/bin/env bash
# Start a loopback Slurm cluster for gpuaccept development and CI: one slurmctld and N slurmd
# ("node1".."nodeN") on one host, all on 127.0.0.1, with state, logs and pid files in one folder.
#
#   eval "$(slurm/dev-cluster/up.sh --nodes 2)"        # CPU-only nodes (what CI uses)
#   eval "$(slurm/dev-cluster/up.sh --nodes 2 --gpus)" # one GPU per node on a multi-GPU host
#   eval "$(slurm/dev-cluster/up.sh --nodes 2 --slurm 26.05)"  # Debian sid's Slurm (chroot.sh builds it)
#   eval "$(slurm/dev-cluster/up.sh --nodes 2 --pyxis DIR)"    # srun --container-image (pyxis.sh builds DIR)
#   eval "$(slurm/dev-cluster/up.sh --nodes 4 --slurm 26.05 --blocks 2 --imex)"  # two NVLink-domain blocks
#
# Only `export` lines go to stdout (so eval works); progress and errors go to stderr.
# Stop it with slurm/dev-cluster/down.sh. Not a production configuration: no auth, no cgroups.
# slurmctld starts with -c (no state from an earlier cluster in DIR); restart-ctld.sh restarts it
# without -c, its jobs and node states kept, as a production controller restarts.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat >&2 <<'EOF'
usage: up.sh --nodes N [--gpus] [--gpus-per-node G] [--cpus-per-node C] [--dir DIR] [--oci runc|crun]
             [--constrain-devices] [--own-mounts] [--blocks B] [--imex]
             [--slurm 22.05|24.11|26.05 | --prefix PREFIX [--debs DEBDIR]] [--pyxis DIR]

  --nodes N           number of slurmd "nodes" (node1..nodeN), all on this host
  --gpus              give each node GPUs as gres (node K gets /dev/nvidia{(K-1)*G .. K*G-1})
  --gpus-per-node G   GPUs per node (implies --gpus; default 1)
  --cpus-per-node C   CPUs each node declares (default 4; Slurm does not check the real count)
  --dir DIR           folder for config, state, logs, pids (default: mktemp -d /tmp/gpuaccept-slurm.XXXX)
  --oci RUNTIME       write oci.conf for Slurm's own containers (srun --container=BUNDLE) with runc or crun
                      (Debian's packages), each node with its own runtime state folder; the tasks' Slurm
                      variables are put back by oci-run.sh (22.05 leaves them out of the container)
  --constrain-devices TaskPlugin=task/cgroup with ConstrainDevices=yes on cgroup v2 without systemd
                      (IgnoreSystemd=yes): a task may open only its own GPUs' device files, as on a
                      production cluster. Needs a writable cgroup v2 hierarchy (not this CI machine's
                      hybrid one); tried on 2 x H100 80GB HBM3 (docs/measurements.md)
  --own-mounts        start each slurmd in a mount namespace of its own (unshare --mount): a node's steps
                      see the host's mounts as they were at its start, and a mount made in its namespace
                      (slurm/dev-cluster/node-exec.sh NODE mount ...) is that node's alone: one node's
                      filesystem missing, read-only, full or hung while the others' stay healthy
  --blocks B          TopologyPlugin=topology/block with a topology.yaml of B blocks of N/B nodes each
                      (b1 = node1..node(N/B), b2 = the next N/B, ...): Slurm's model of NVLink domains
                      (one GB200 NVL72 rack a block); needs topology/block (Slurm 23.11+: --slurm 24.11|26.05)
  --imex              SwitchType=switch/nvidia_imex: every step gets an IMEX channel
                      (/dev/nvidia-caps-imex-channels/channelN, made by slurmd). This host has no NVIDIA
                      driver, so the plugin is given a character major no driver holds
                      (SwitchParameters=imex_dev_major=M, the first of 234-254 absent from /proc/devices):
                      the device files are real, open() on them fails with ENXIO. Only with --slurm 26.05
                      (the version it was tried on). The folder is the host's: down.sh removes it
  --slurm VERSION     22.05: the host's Slurm (Debian bookworm; the default). 24.11 or 26.05: Debian
                      trixie's or sid's, from the root that chroot.sh builds and caches; its daemons
                      and client commands run on this host with that root's own loader and libraries
                      (ROOT/host-bin, put first on PATH by the printed exports)
  --prefix PREFIX     use Slurm unpacked under PREFIX (dpkg -x) instead of the system's binaries
  --debs DEBDIR       first unpack DEBDIR/*.deb into PREFIX (see debs.txt)
  --pyxis DIR         load DIR's pyxis (DIR/lib/slurm/spank_pyxis.so, built by pyxis.sh for the host's
                      Slurm 22.05 only) through CLUSTER/plugstack.conf, so srun takes --container-image
                      and the other --container-* options, and run DIR's enroot. Each node gets its own
                      enroot data, runtime, cache and temp folders under CLUSTER/enroot/nodeK (one host:
                      two nodes would otherwise share enroot's containers, e.g. pyxis_<job>.<step>), and
                      pyxis's runtime_path is CLUSTER/pyxis

environment: GPUACCEPT_SLURM_BASE_PORT (first of N+1 ports; default: a free range picked at random),
  GPUACCEPT_SLURM_PORTS (FIRST-LAST: where that random range lies, default 10000-19999; the selftests
  give each pytest-xdist worker its own, so two workers' clusters never pick one port),
  GPUACCEPT_DEV_TIMEOUT (seconds to wait for IDLE nodes, default 60),
  GPUACCEPT_DEV_GPU_FILE (gres device path stem, default /dev/nvidia; for tests without GPUs)
EOF
  exit 2
}

log() { printf 'up.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

nodes="" gpus=0 gpus_per_node=1 cpus=4 dir="" prefix="" debs="" slurm="" oci="" pyxis="" devices=0 own_mounts=0
blocks=0 imex=0
while (($#)); do
  case $1 in
    --nodes) nodes=${2:?}; shift 2 ;;
    --gpus) gpus=1; shift ;;
    --gpus-per-node) gpus=1; gpus_per_node=${2:?}; shift 2 ;;
    --cpus-per-node) cpus=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; shift 2 ;;
    --prefix) prefix=${2:?}; shift 2 ;;
    --debs) debs=${2:?}; shift 2 ;;
    --slurm) slurm=${2:?}; shift 2 ;;
    --oci) oci=${2:?}; shift 2 ;;
    --constrain-devices) devices=1; shift ;;
    --own-mounts) own_mounts=1; shift ;;
    --blocks) blocks=${2:?}; shift 2 ;;
    --imex) imex=1; shift ;;
    --pyxis) pyxis=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) log "unknown argument: $1"; usage ;;
  esac
done

[[ $nodes =~ ^[1-9][0-9]*$ ]] || { log "--nodes N is required (a positive integer)"; usage; }
[[ $gpus_per_node =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node must be a positive integer"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus-per-node must be a positive integer"
[[ -z $debs || -n $prefix ]] || die "--debs needs --prefix"
case $slurm in
  "" | 22.05 | 24.11 | 26.05) ;;
  *) die "--slurm must be 22.05 (the host's), 24.11 or 26.05, not '$slurm'" ;;
esac
[[ -z $prefix || -z $slurm ]] || die "--slurm and --prefix exclude each other"
if [[ $blocks != 0 ]]; then
  [[ $blocks =~ ^[1-9][0-9]*$ ]] || die "--blocks must be a positive integer"
  ((nodes % blocks == 0)) || die "--blocks $blocks: $nodes nodes do not split into $blocks equal blocks"
  [[ $slurm == 24.11 || $slurm == 26.05 ]] || die "--blocks needs topology/block (Slurm 23.11+): add --slurm 24.11 or 26.05"
fi
((!imex)) || [[ $slurm == 26.05 ]] || die "--imex: switch/nvidia_imex was tried with --slurm 26.05 only: add it"
case $oci in
  "" | runc | crun) ;;
  *) die "--oci must be runc or crun, not '$oci'" ;;
esac
[[ -z $oci ]] || command -v "$oci" >/dev/null || die "--oci $oci: $oci is not installed (apt-get install $oci)"
if [[ -n $pyxis ]]; then
  [[ -f $pyxis/lib/slurm/spank_pyxis.so && -x $pyxis/bin/enroot ]] ||
    die "--pyxis $pyxis holds no lib/slurm/spank_pyxis.so and bin/enroot (build it with pyxis.sh)"
  pyxis=$(cd "$pyxis" && pwd)
  # A SPANK plugin loads only in the Slurm release whose spank.h it was compiled with.
  [[ -z $prefix && ( -z $slurm || $slurm == 22.05 ) ]] ||
    die "--pyxis: pyxis.sh builds pyxis for the host's Slurm only (not --slurm 24.11/26.05 or --prefix)"
fi
# slurmd switches to the job's user and the prefix mode links into /usr/lib: both need root.
((EUID == 0)) || die "must run as root"
# Paths go unquoted into slurm.conf and the printed export lines: keep them plain.
safe='^[A-Za-z0-9_./+-]+$'
for p in "$dir" "$prefix" "$pyxis"; do
  [[ -z $p || $p =~ $safe ]] || die "path '$p' must only hold letters, digits and _ . / + -"
done

multiarch="$(uname -m)-linux-gnu"

# --- Slurm binaries ---------------------------------------------------------------------------
sbin=/usr/sbin bin=/usr/bin lib_path=""
if [[ -n $prefix ]]; then
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  plib=$prefix/usr/lib/$multiarch
  if [[ -n $debs ]]; then
    shopt -s nullglob
    pkgs=("$debs"/*.deb)
    shopt -u nullglob
    ((${#pkgs[@]})) || die "no .deb files in $debs"
    log "unpacking ${#pkgs[@]} .deb files into $prefix"
    for f in "${pkgs[@]}"; do dpkg -x "$f" "$prefix"; done
    # Tasks inherit LD_LIBRARY_PATH from srun, so any library the host already has must come from
    # the host (a Debian copy could shadow it for python/torch): keep only the ones it lacks.
    host_sonames=$(ldconfig -p | awk 'NR > 1 {print $1}')
    for libdir in "$plib" "$prefix/lib/$multiarch"; do
      [[ -d $libdir ]] || continue
      for f in "$libdir"/lib*.so.*; do
        name=${f##*/}
        # libfoo.so.1.2.3 -> try libfoo.so.1.2.3, libfoo.so.1.2, libfoo.so.1 against the host cache
        while [[ $name == *.so.* ]]; do
          if grep -qxF "$name" <<<"$host_sonames"; then rm -f "$f"; break; fi
          [[ $name == *.so.*.* ]] || break
          name=${name%.*}
        done
      done
    done
  fi
  [[ -x $prefix/usr/sbin/slurmd-wlm || -x $prefix/usr/sbin/slurmd ]] ||
    die "no slurmd under $prefix/usr/sbin (give --debs DIR to unpack the .debs first)"
  # slurmd takes its node name from argv[0] when that is "slurmd-XYZ" (started as slurmd-wlm it
  # thinks it is node "wlm"): run the daemons under their plain names.
  for b in slurmd slurmctld slurmstepd; do
    if [[ -e $prefix/usr/sbin/$b-wlm ]]; then ln -sfn "$b-wlm" "$prefix/usr/sbin/$b"; fi
  done
  # The binaries' RUNPATH and compiled-in PluginDir are /usr/lib/<multiarch>/slurm-wlm: link ours
  # there when the host has none (overriding PluginDir alone does not cover the RUNPATH).
  sys_plugins=/usr/lib/$multiarch/slurm-wlm
  if [[ ! -e $sys_plugins ]]; then
    ln -s "$plib/slurm-wlm" "$sys_plugins"
    log "linked $sys_plugins -> $plib/slurm-wlm"
  elif [[ $(readlink -f "$sys_plugins") != "$(readlink -f "$plib/slurm-wlm")" ]]; then
    log "warning: $sys_plugins already exists; its plugins are used (must be the same Slurm version)"
  fi
  lib_path=$plib:$prefix/lib/$multiarch:$plib/slurm-wlm
  export LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$prefix/usr/bin:$prefix/usr/sbin:$PATH
  sbin=$prefix/usr/sbin bin=$prefix/usr/bin
  # Fail now, with names, rather than with a daemon that dies silently after daemonizing.
  missing=$(for f in "$sbin"/slurmd "$sbin"/slurmctld "$sbin"/slurmstepd "$bin"/srun "$bin"/sinfo; do
    ldd "$f" 2>/dev/null | awk -v f="${f##*/}" '/not found/ {print f ": " $1}'
  done)
  [[ -z $missing ]] || die "libraries missing (add their .debs to $debs):"$'\n'"$missing"
fi
root=""
if [[ -n $slurm && $slurm != 22.05 ]]; then
  root=$("$here/chroot.sh" "$slurm") || die "no Slurm $slurm root (chroot.sh $slurm failed)"
fi

# --- cluster folder ---------------------------------------------------------------------------
if [[ -z $dir ]]; then
  dir=$(mktemp -d /tmp/gpuaccept-slurm.XXXX)
else
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
fi

plugin_line=""
if [[ -n $root ]]; then
  # Trixie's and sid's Slurm need a newer glibc than the host's. chroot.sh made copies of the
  # commands (ROOT/host-bin) whose ELF interpreter is the root's loader and whose DT_RPATH is the
  # root's libraries: they run on the host, no chroot and no mount (nothing to unmount on teardown),
  # and put nothing in the environment, so slurmstepd starts the tasks on the host with the host's
  # python and the project installed there. PluginDir: the compiled-in one holds the host's plugins.
  sbin=$root/host-bin bin=$root/host-bin
  plugin_line="PluginDir=$root/usr/lib/$multiarch/slurm-wlm"
  export PATH=$bin:$PATH
elif [[ $slurm == 22.05 ]]; then
  have=$("$sbin/slurmd" -V 2>/dev/null | awk '{print $2}') || true
  [[ $have == 22.05.* ]] || die "--slurm 22.05 asks for the host's Slurm, but $sbin/slurmd is '${have:-absent}'"
fi
for b in "$sbin"/slurmctld "$sbin"/slurmd "$sbin"/slurmstepd "$bin"/sinfo "$bin"/scontrol; do
  [[ -x $b ]] || die "$b not found (install slurm-wlm, or use --prefix or --slurm)"
done
# ours PID: that process is a daemon of this folder's cluster. Not `kill -0`: a dead daemon can stay
# a zombie for a while where PID 1 reaps lazily (containers, VMs), and pids get reused.
ours() { [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") == *"$dir/slurm.conf"* ]]; }
if [[ -s $dir/pids ]]; then
  while read -r _ pid; do
    ! ours "$pid" || die "$dir already has a running daemon (pid $pid): run down.sh $dir"
  done <"$dir/pids"
fi
mkdir -p "$dir"/{state,log,run}
rm -f "$dir"/run/*.pid # stale ones (a KILLed daemon leaves its own) would be read as new
for ((k = 1; k <= nodes; k++)); do mkdir -p "$dir/spool/node$k"; done
: >"$dir/pids"
conf=$dir/slurm.conf

# --- ports: slurmctld on BASE, nodeK's slurmd on BASE+K ----------------------------------------
# A random free range in 10000-19999: below the kernel's ephemeral range (32768+), so two clusters do
# not clash, and below the probes' rendezvous ports (20000-32767, gpuaccept/probes/_protocol.py), so a
# probe's TCP store never lands on a slurmd's port (seen in CI: a rank connected to a daemon that closed
# the connection, "Failed to recv, got 0 bytes", with the daemons in 20000-32000). A range checked free
# can still be taken by another cluster starting at the same moment: GPUACCEPT_SLURM_PORTS gives each
# of several starters (pytest-xdist workers, .ci/run) a part of its own.
if [[ -n ${GPUACCEPT_SLURM_BASE_PORT:-} ]]; then
  base=$GPUACCEPT_SLURM_BASE_PORT
else
  ports=${GPUACCEPT_SLURM_PORTS:-10000-19999}
  [[ $ports =~ ^([0-9]+)-([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 1024 && BASH_REMATCH[2] < 20000)) ||
    die "GPUACCEPT_SLURM_PORTS='$ports': not FIRST-LAST within 1024-19999"
  base=$(python3 - "$((nodes + 1))" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" <<'PY'
import random, socket, sys
count, first, last = (int(v) for v in sys.argv[1:])
if last + 1 - first < count:
    sys.exit("GPUACCEPT_SLURM_PORTS %d-%d: fewer than %d ports" % (first, last, count))
for _ in range(200):
    base = random.randrange(first, last + 2 - count)
    socks = []
    try:
        for port in range(base, base + count):
            sock = socket.socket()
            sock.bind(("0.0.0.0", port))
            socks.append(sock)
    except OSError:
        continue
    finally:
        for sock in socks:
            sock.close()
    print(base)
    break
else:
    sys.exit("no free range of %d ports found" % count)
PY
)
fi
[[ $base =~ ^[0-9]+$ ]] || die "bad base port '$base'"

# --- configuration ----------------------------------------------------------------------------
first_job=$((RANDOM % 90000 + 10000))
proctrack=proctrack/linuxproc task_plugin=task/none
((devices)) && proctrack=proctrack/cgroup task_plugin=task/cgroup
gres_line="" prolog_line=""
if ((gpus)); then
  gres_line="GresTypes=gpu"
  prolog_line="TaskProlog=$dir/task-prolog.sh"
fi
cat >"$conf" <<EOF
# Written by slurm/dev-cluster/up.sh: a loopback dev cluster on $(hostname), not a production config.
ClusterName=gpuaccept
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
# No munge on the dev machines: every request is trusted.
AuthType=auth/none
CredType=cred/none
# No systemd and no cgroup delegation: track processes by parentage, bind nothing.
ProctrackType=$proctrack
TaskPlugin=$task_plugin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Nodes declare more CPUs than the host has (and share one host): trust slurm.conf, do not drain.
SlurmdParameters=config_overrides
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
# Short timeouts so a killed slurmd is noticed in well under a minute.
SlurmdTimeout=30
MessageTimeout=10
KillWait=5
InactiveLimit=0
# Job ids start at a random number: probes derive their rendezvous port from the job and step ids
# (gpuaccept/probes/_protocol.py), so two clusters on one host that both start at job 1 would have
# their training steps listen on the same port (seen: EADDRINUSE in a concurrent run).
FirstJobId=$first_job
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
$gres_line
$prolog_line
$plugin_line
EOF
# --- NVLink domains as Slurm sees them: topology/block and switch/nvidia_imex ------------------------
if ((blocks)); then
  # One block per NVLink domain; BlockSizes is the planning unit. Slurm prints BlockSize=<that size> for
  # every block whatever its nodes: the trays a block holds are counted from its Nodes=
  # (gpuaccept/dispatch/topology.py). 25.05+ reads topology.yaml (tried on 26.05.5); 24.11 reads topology.conf
  # (written the same way, not yet started here: no 24.11 root was built when this was added).
  per=$((nodes / blocks))
  if [[ $slurm == 26.05 ]]; then
    {
      echo "# Written by slurm/dev-cluster/up.sh --blocks $blocks"
      echo "- topology: nvl"
      echo "  cluster_default: true"
      echo "  block:"
      echo "    block_sizes: [$per]"
      echo "    blocks:"
      for ((b = 1; b <= blocks; b++)); do
        echo "      - block: b$b"
        echo "        nodes: node[$(((b - 1) * per + 1))-$((b * per))]"
      done
    } >"$dir/topology.yaml"
    rm -f "$dir/topology.conf"
  else
    {
      echo "# Written by slurm/dev-cluster/up.sh --blocks $blocks"
      for ((b = 1; b <= blocks; b++)); do echo "BlockName=b$b Nodes=node[$(((b - 1) * per + 1))-$((b * per))]"; done
      echo "BlockSizes=$per"
    } >"$dir/topology.conf"
    rm -f "$dir/topology.yaml"
  fi
  echo "TopologyPlugin=topology/block" >>"$conf"
else
  rm -f "$dir/topology.yaml" "$dir/topology.conf"
fi
if ((imex)); then
  # The plugin disables itself where /proc/devices lists no nvidia-caps-imex-channels, unless it is given
  # the major: a free one here (no driver behind it), so slurmd makes real channel files for every step.
  imex_major=$(awk '/^Character/ {c = 1; next} /^Block/ {c = 0} c && NF {print $1}' /proc/devices | python3 -c '
import sys
used = {int(w) for w in sys.stdin.read().split()}
print(next(m for m in range(234, 255) if m not in used))') || die "--imex: no free character major in 234-254"
  echo "SwitchType=switch/nvidia_imex" >>"$conf"
  echo "SwitchParameters=imex_dev_major=$imex_major" >>"$conf"
fi
if [[ -n $pyxis ]]; then
  # srun loads the plugin too (it adds the --container-* options), reading the same slurm.conf.
  # runtime_path (default /run/pyxis) holds squashfs files that pyxis imports from docker://
  # images, named <uid>/<job>.<step>.squashfs: one folder per cluster, shared by its nodes (a
  # plugstack.conf cannot differ per node); local .sqsh images do not use it.
  echo "PlugStackConfig=$dir/plugstack.conf" >>"$conf"
  echo "required $pyxis/lib/slurm/spank_pyxis.so runtime_path=$dir/pyxis" >"$dir/plugstack.conf"
  # pyxis runs enroot with an environment of its own: it clears slurmstepd's, keeps only PATH, adds
  # the job's minus ENROOT_{RUNTIME,DATA,CACHE,TEMP}_PATH and the like (pyxis_slurmstepd.c,
  # slurm_clear_env and enroot_deny_env), so ENROOT_* exported to slurmd would never reach enroot.
  # PATH does: slurmd nodeK starts with CLUSTER/enroot/nodeK/bin first on it, where an `enroot`
  # wrapper sets that node's paths and runs DIR's enroot (whose helpers enroot-* it finds on PATH).
  for ((k = 1; k <= nodes; k++)); do
    e=$dir/enroot/node$k
    mkdir -p "$e"/{bin,data,run,cache,tmp,config}
    cat >"$e/bin/enroot" <<EOF
#!/bin/sh
# Written by up.sh --pyxis: enroot for node$k of the dev cluster in $dir.
export PATH="$pyxis/bin:\$PATH"
export ENROOT_DATA_PATH=$e/data ENROOT_RUNTIME_PATH=$e/run ENROOT_CACHE_PATH=$e/cache
export ENROOT_TEMP_PATH=$e/tmp ENROOT_CONFIG_PATH=$e/config
exec $pyxis/bin/enroot "\$@"
EOF
    chmod 755 "$e/bin/enroot"
  done
fi
for ((k = 1; k <= nodes; k++)); do
  gres=""
  ((gpus)) && gres=" Gres=gpu:$gpus_per_node"
  echo "NodeName=node$k NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((base + k))" \
    "CPUs=$cpus Boards=1 SocketsPerBoard=1 CoresPerSocket=$cpus ThreadsPerCore=1" \
    "RealMemory=1024$gres State=UNKNOWN" >>"$conf"
done
echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$conf"

# cgroup v2 without systemd makes the cgroup/v2 plugin fail and slurmd exit; on 22.05 v1 initialises
# and, with proctrack/linuxproc + task/none, constrains nothing. From 24.05 on, slurmd exits "cgroup
# filesystem not mounted" with v1 too, and "disabled" (new in 24.05) says what is meant.
if ((devices)); then
  # --constrain-devices: the cgroup v2 plugin, which needs systemd unless told to manage the hierarchy
  # itself (IgnoreSystemd, 22.05 on); the devices controller of v2 is an eBPF program per step
  printf '%s\n' CgroupPlugin=cgroup/v2 IgnoreSystemd=yes ConstrainDevices=yes >"$dir/cgroup.conf"
elif [[ -n $root ]]; then
  echo "CgroupPlugin=disabled" >"$dir/cgroup.conf"
else
  echo "CgroupPlugin=cgroup/v1" >"$dir/cgroup.conf"
fi

: >"$dir/gres.conf"
if ((gpus)); then
  stem=${GPUACCEPT_DEV_GPU_FILE:-/dev/nvidia}
  for ((k = 1; k <= nodes; k++)); do
    first=$(((k - 1) * gpus_per_node)) last=$((k * gpus_per_node - 1))
    if ((first == last)); then files=$stem$first; else files="${stem}[$first-$last]"; fi
    echo "NodeName=node$k Name=gpu File=$files" >>"$dir/gres.conf"
    for ((g = first; g <= last; g++)); do
      [[ -e $stem$g ]] || log "warning: $stem$g does not exist (node$k's gres)"
    done
  done
  # Slurm numbers GPUs within a node, so every node's task would get CUDA_VISIBLE_DEVICES=0 and
  # NCCL would refuse the duplicate GPU. On this one-host cluster nodeK owns the host's GPUs
  # (K-1)*G .. K*G-1: the TaskProlog turns Slurm's node-local indexes into those physical ones.
  # A real cluster needs none of this (one GPU set per host).
  cat >"$dir/task-prolog.sh" <<EOF
#!/bin/bash
# Dev-cluster-only TaskProlog written by up.sh (GPUs per node: $gpus_per_node). Its "export" lines
# are applied to the task's environment by slurmstepd.
gpus_per_node=$gpus_per_node
EOF
  cat >>"$dir/task-prolog.sh" <<'EOF'
[[ ${SLURMD_NODENAME:-} =~ ^node([0-9]+)$ ]] || exit 0
first=$(( (BASH_REMATCH[1] - 1) * gpus_per_node ))
# No GPU in this step (or not Slurm's plain index list): leave the environment alone.
[[ -n ${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-}} ]] || exit 0
[[ ${CUDA_VISIBLE_DEVICES:-} =~ ^[0-9]+(,[0-9]+)*$ ]] || exit 0
physical=""
IFS=, read -ra local_ids <<<"$CUDA_VISIBLE_DEVICES"
for i in "${local_ids[@]}"; do physical+=${physical:+,}$((first + i)); done
echo "export CUDA_VISIBLE_DEVICES=$physical"
EOF
  chmod 755 "$dir/task-prolog.sh"
fi

# --- Slurm's own OCI containers (srun --container=BUNDLE) ------------------------------------------
# slurmstepd reads oci.conf beside slurm.conf at every step. RunTimeRun (one command that creates, starts
# and waits) rather than RunTimeCreate/RunTimeStart: with runc's create/start pair 22.05's step hung with
# no output. Each node gets its own runtime state folder (%n): all nodes share this host, and container
# ids carry the node name anyway. This host mounts cgroup v1 and v2 side by side, where crun 1.8 refuses
# to start anything ("cgroups in hybrid mode not supported"); runc runs.
if [[ -n $oci ]]; then
  state=$dir/oci/%n
  cat >"$dir/oci.conf" <<EOF
# Written by slurm/dev-cluster/up.sh --oci $oci
RunTimeQuery="$oci --root=$state state %n.%u.%j.%s.%t"
RunTimeRun="$here/oci-run.sh %b %n.%u.%j.%s.%t %n %t $oci --root=$state"
RunTimeKill="$oci --root=$state kill -a %n.%u.%j.%s.%t"
RunTimeDelete="$oci --root=$state delete --force %n.%u.%j.%s.%t"
EOF
else
  rm -f "$dir/oci.conf"
fi

# --- start the daemons --------------------------------------------------------------------------
# The daemons daemonize themselves and write pid files; their own stdout/stderr (messages before
# the log file opens) go to log/*.out so the eval'd $(...) never waits on them. GPUACCEPT_DEV_CLUSTER
# in their environment (inherited by slurmstepd) lets down.sh find strays of this cluster only.
export SLURM_CONF=$conf GPUACCEPT_DEV_CLUSTER=$dir
started=$EPOCHREALTIME

wait_pidfile() { # wait_pidfile NAME FILE: append "NAME PID" to pids once FILE names a live process
  local i pid
  for ((i = 0; i < 100; i++)); do
    pid=$(cat "$2" 2>/dev/null || true)
    if [[ -n $pid ]] && ours "$pid"; then
      echo "$1 $pid" >>"$dir/pids"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

fail() { # fail MESSAGE: show what the daemons said, stop what started, keep the folder
  log "error: $1"
  sinfo -N -o "%N %T %E" >&2 2>/dev/null || true
  for f in "$dir"/log/*; do
    [[ -s $f ]] || continue
    printf '\n==> %s <==\n' "$f" >&2
    tail -n 15 "$f" >&2
  done
  "$here/down.sh" "$dir" >&2 || true
  log "logs kept in $dir/log"
  exit 1
}

log "starting slurmctld on 127.0.0.1:$base ($dir)"
"$sbin/slurmctld" -c -f "$conf" </dev/null >>"$dir/log/slurmctld.out" 2>&1 ||
  fail "slurmctld did not start"
wait_pidfile slurmctld "$dir/run/slurmctld.pid" || fail "slurmctld wrote no pid file"
namespace=()
((own_mounts)) && namespace=(unshare --mount --propagation private)
for ((k = 1; k <= nodes; k++)); do
  log "starting slurmd node$k on 127.0.0.1:$((base + k))"
  node_path=$PATH
  [[ -z $pyxis ]] || node_path=$dir/enroot/node$k/bin:$PATH
  PATH=$node_path "${namespace[@]}" "$sbin/slurmd" -f "$conf" -N "node$k" -d "$sbin/slurmstepd" \
    </dev/null >>"$dir/log/slurmd-node$k.out" 2>&1 || fail "slurmd node$k did not start"
  # One at a time, so that pids lists every daemon started before a failure (down.sh stops them).
  wait_pidfile "node$k" "$dir/run/slurmd-node$k.pid" || fail "slurmd node$k wrote no pid file"
done

# --- wait until every node is IDLE ---------------------------------------------------------------
timeout_s=${GPUACCEPT_DEV_TIMEOUT:-60}
deadline=$(($(date +%s) + timeout_s))
while :; do
  idle=$(sinfo -N -h -o "%N %T" 2>/dev/null | awk '$2 == "idle"' | wc -l) || idle=0
  ((idle == nodes)) && break
  while read -r name pid; do
    ours "$pid" || fail "$name (pid $pid) exited"
  done <"$dir/pids"
  (($(date +%s) < deadline)) || fail "only $idle of $nodes nodes IDLE after ${timeout_s} s"
  sleep 0.2
done
log "$nodes nodes IDLE after $(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s"

# --- environment for the caller ------------------------------------------------------------------
{
  echo "export SLURM_CONF=$conf"
  if [[ -n $root ]]; then
    echo "export PATH=\"$bin:\$PATH\""
  fi
  if [[ -n $prefix ]]; then
    echo "export PATH=\"$prefix/usr/bin:$prefix/usr/sbin:\$PATH\""
    echo "export LD_LIBRARY_PATH=\"$lib_path\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
  fi
  echo "export GPUACCEPT_DEV_CLUSTER=$dir"
  echo "export GPUACCEPT_PARTITION=main"
  # node names of the loopback cluster do not resolve; every node is this host
  echo "export GPUACCEPT_MASTER_ADDR=127.0.0.1"
} | tee "$dir/env"
