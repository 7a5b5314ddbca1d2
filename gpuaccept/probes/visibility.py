"""What this task may touch: its CUDA_VISIBLE_DEVICES, the GPUs NVML shows it, and its CPU binding.

The Slurm test launches one task per declared GPU and asserts the visible sets are disjoint and
complete. NVML is asked for the UUIDs (and device-file minor numbers) behind ``CUDA_VISIBLE_DEVICES``
(what CUDA will use); then every ``/dev/nvidiaN`` is opened once: device cgroups (Slurm's
``ConstrainDevices=yes``) refuse the ones that are not the task's own, and without them a task can
open, hang or corrupt its neighbours' GPUs even when ``CUDA_VISIBLE_DEVICES`` is right. Opening a
device file without issuing any ioctl changes nothing on the GPU.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from gpuaccept.probes._cpus import granted_cpus
from gpuaccept.probes._nvml import nvml, text
from gpuaccept.probes._protocol import emit

__all__ = ["collect"]


def collect() -> dict[str, Any]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    tokens = [t.strip() for t in visible.split(",") if t.strip()] if visible else []
    lib = nvml()
    uuids: list[str] = []
    minors: list[int] = []
    nvml_count = 0
    if lib is not None:
        nvml_count = lib.nvmlDeviceGetCount()
        for token in tokens:
            try:
                handle = (
                    lib.nvmlDeviceGetHandleByUUID(token)
                    if token.startswith(("GPU-", "MIG-"))
                    else lib.nvmlDeviceGetHandleByIndex(int(token))
                )
                uuids.append(text(lib.nvmlDeviceGetUUID(handle)))
                minors.append(int(lib.nvmlDeviceGetMinorNumber(handle)))
            except Exception as exc:
                uuids.append(f"unresolvable {token}: {type(exc).__name__}")
    return {
        "cuda_visible_devices": visible,
        "visible_uuids": uuids,
        "nvml_devices": nvml_count,
        "own_minors": minors,
        "devices_openable": openable_devices(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "granted_cpus": granted_cpus(),
        "host_cpus": os.cpu_count(),
        "slurm_cpu_bind": os.environ.get("SLURM_CPU_BIND"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm_step_id": os.environ.get("SLURM_STEP_ID"),
    }


def openable_devices(dev: Path = Path("/dev")) -> list[int]:
    """Minor numbers of the ``/dev/nvidiaN`` files this task can open read-write (none on a CPU node)."""
    found = []
    for path in dev.glob("nvidia[0-9]*"):
        match = re.fullmatch(r"nvidia(\d+)", path.name)
        if match is None:
            continue
        try:
            os.close(os.open(path, os.O_RDWR))
        except OSError:
            continue
        found.append(int(match.group(1)))
    return sorted(found)


def main() -> None:
    emit(collect(), probe="visibility")


if __name__ == "__main__":
    main()
