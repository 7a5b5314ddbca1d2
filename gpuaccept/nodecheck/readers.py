"""What the node check reads, each a function run in its own watchdog child (``watchdog.run_readers``).

Every reading goes through the probes' own code (``gpu_health.read_gpu``, ``nvlink.read_links`` and
``nvlink_error_counters``, ``xid.read_log``, ``infiniband.collect``, ``hygiene.collect``, the
fingerprint's stack versions), so the gate and the suite read a node the same way. Each reader
announces its next blocking call with ``progress`` so a hang is named.

Recorded readings stand in for the live ones where the probes already accept them (``--nvml-load``: a
``gpu_health --dump`` file, ``--nvlink-load``: an ``nvlink --dump`` file, ``--sysfs-root``: a recorded
sysfs tree, ``--kernel-log``: a saved kernel log): the selftests inject faults by editing those, and
a FIFO in their place is a read that never returns.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaccept.nodecheck.watchdog import progress
from gpuaccept.probes import hygiene, infiniband, nvlink, xid
from gpuaccept.probes._gpu import nvlink_error_counters
from gpuaccept.probes._nvml import nvml
from gpuaccept.probes.fingerprint import _python_stack
from gpuaccept.probes.gpu_health import NO_NVML, driver_versions, read_gpu

__all__ = [
    "Sources",
    "boot_id",
    "jobs_on_node",
    "read_gpus",
    "read_hygiene",
    "read_ib",
    "read_kernel_log",
    "read_versions",
    "slurm_job_of",
]


@dataclass(frozen=True)
class Sources:
    """Where the readings come from: the live node, or recorded files standing in for parts of it."""

    nvml_load: Path | None = None
    nvlink_load: Path | None = None
    sysfs_root: Path = Path("/sys")
    kernel_log: Path | None = None
    shm: str = "/dev/shm"
    proc_root: Path = Path("/proc")


def boot_id(proc_root: Path = Path("/proc")) -> str:
    """This boot's id: counters and log positions kept from an earlier boot mean nothing now."""
    try:
        return (proc_root / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return "unknown"


_CGROUP_JOB = re.compile(r"/job_(\d+)(?:/|$)")


def slurm_job_of(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The Slurm job a process belongs to: the ``[JOB.STEP]`` of the ``slurmstepd`` it descends from,
    else the ``job_<id>`` of its cgroup (a process pam_slurm_adopt put into a job from an ssh login).

    A process that is in no job either way (started outside Slurm, or left behind by a job whose step
    has ended and reparented to init) belongs to no job.
    """
    current = pid
    for _ in range(64):
        try:
            stat = (proc_root / str(current) / "stat").read_text()
        except OSError:
            break
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        if comm.startswith("slurmstepd"):
            return _stepd_job(proc_root / str(current)) or "?"
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent <= 1:
            break
        current = parent
    try:
        match = _CGROUP_JOB.search((proc_root / str(pid) / "cgroup").read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def _stepd_job(proc: Path) -> str | None:
    """``slurmstepd: [42.batch]`` -> ``42``."""
    try:
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    inside = cmdline.split("[", 1)[-1].split("]", 1)[0] if "[" in cmdline else ""
    return inside.split(".", 1)[0] or None


def jobs_on_node(proc_root: Path = Path("/proc")) -> list[str]:
    """Jobs with a ``slurmstepd`` on this host (their steps are running here)."""
    jobs: set[str] = set()
    for proc in proc_root.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "comm").read_text().startswith("slurmstepd"):
                continue
        except OSError:
            continue
        job = _stepd_job(proc)
        if job:
            jobs.add(job)
    return sorted(jobs)


def _live_gpus() -> dict[str, Any]:
    progress("nvmlInit")
    lib = nvml()
    if lib is None:
        return dict(NO_NVML, gpus=[])
    progress("nvmlDeviceGetCount")
    count = lib.nvmlDeviceGetCount()
    progress("nvmlSystemGetDriverVersion")
    data: dict[str, Any] = {**driver_versions(lib), "gpus": []}
    for index in range(count):
        progress(f"GPU {index}: nvmlDeviceGetHandleByIndex")
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        progress(f"GPU {index}: health readings (ECC, row remaps, processes)")
        gpu = read_gpu(lib, handle)
        progress(f"GPU {index}: nvmlDeviceGetNvLinkState")
        links = nvlink.read_links(lib, handle)
        active = [k["link"] for k in links if k["active"]]
        progress(f"GPU {index}: NVLink error counters")
        gpu["nvlink"] = {  # the nvlink probe's links and counters (its speeds are test_nvlink's, not the gate's)
            "links": links,
            "active": len(active),
            "supported": len(links),
            "errors": nvlink_error_counters(lib, handle, active),
        }
        data["gpus"].append(gpu)
    return data


def _loaded_gpus(nvml_load: Path, nvlink_load: Path | None) -> dict[str, Any]:
    progress(f"reading {nvml_load}")
    data: dict[str, Any] = json.loads(nvml_load.read_text())
    if nvlink_load is not None:
        progress(f"reading {nvlink_load}")
        links = {g["index"]: g.get("nvlink") for g in json.loads(nvlink_load.read_text()).get("gpus") or []}
        for gpu in data.get("gpus") or []:
            gpu["nvlink"] = links.get(gpu["index"])
    return data


def read_gpus(sources: Sources) -> dict[str, Any]:
    """Driver, CUDA, and per GPU: identity, ECC, row remaps, the PCIe replay counter, processes (with their
    Slurm job), NVLinks; and when they were read (``read_at_s``, monotonic)."""
    data = _loaded_gpus(sources.nvml_load, sources.nvlink_load) if sources.nvml_load else _live_gpus()
    data["read_at_s"] = round(time.monotonic(), 3)  # the PCIe replay counters' time base (a window between checks)
    for gpu in data.get("gpus") or []:
        for proc in gpu.get("processes") or []:
            progress(f"GPU {gpu.get('index')}: Slurm job of pid {proc['pid']}")
            proc["job"] = slurm_job_of(int(proc["pid"]), sources.proc_root)
    return data


def read_kernel_log(sources: Sources) -> dict[str, Any]:
    """The ``xid`` probe's reading (its Xid lines and the window they cover), with this boot's id (the
    window is cut by the caller)."""
    progress(f"reading {sources.kernel_log}" if sources.kernel_log else "kernel log (dmesg, journalctl -k, /dev/kmsg)")
    return {**xid.collect(["dmesg", "journalctl", "kmsg"], sources.kernel_log), "boot_id": boot_id()}


def read_ib(sources: Sources) -> dict[str, Any]:
    """HCAs, ports (state, rate, link layer) and error counters from sysfs."""
    progress(f"sysfs {sources.sysfs_root / 'class' / 'infiniband'}")
    return infiniband.collect(sources.sysfs_root)


def read_hygiene(sources: Sources) -> dict[str, Any]:
    """/dev/shm size and free space, and this process's ulimits (slurmd's, which jobs inherit)."""
    progress(f"statvfs {sources.shm}")
    data = hygiene.collect(sources.shm)
    try:
        stat = os.statvfs(sources.shm)
        data["dev_shm_free_gib"] = round(stat.f_bavail * stat.f_frsize / 2**30, 3)
    except OSError:
        data["dev_shm_free_gib"] = None
    progress("jobs running here (slurmstepd in /proc)")
    data["jobs"] = jobs_on_node(sources.proc_root)
    return data


def read_versions() -> dict[str, Any]:
    """The training stack's versions (torch, NCCL) as the fingerprint probe reads them, without torch."""
    progress("NCCL version (ncclGetVersion in the libnccl torch loads)")
    return _python_stack(True)
