"""Pinned host<->device bandwidth of one GPU (GB/s each way), from the GPU's own NUMA node.

One rank per GPU, all GPUs of a node at once (they share the host's memory and root complexes, as a
data loader does). Before allocating, the rank binds itself to the CPUs NVML names as local to its GPU
(``nvmlDeviceGetCpuAffinity``, intersected with what the job step allows), so the pinned buffer is
first-touched on the GPU's NUMA node: a remote-socket buffer would measure the CPU interconnect, not
the PCIe link. ``--no-bind`` skips the binding (to see what an unbound job gets).

H2D is ``dev.copy_(host, non_blocking=True)``, D2H the reverse, ``--size`` bytes each (default 1 GiB),
timed with CUDA events after a warm-up; the median batch is reported. While the copies run the probe
reads the PCIe link's *current* generation and width from NVML: under load a healthy link is at its
maximum, so this is where a link that trained down (Gen4 instead of Gen5, x8 instead of x16) shows,
unlike an idle reading, which power management lowers on many boards.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from gpuaccept.probes._bench import Preflight, median, preflight, time_batches, torch_device_bus
from gpuaccept.probes._gpu import cpu_affinity, numa_node
from gpuaccept.probes._protocol import emit
from gpuaccept.probes.membw import parse_size

__all__ = ["bind_local", "main"]


def bind_local(pre: Preflight) -> dict[str, Any]:
    """Pin this process to the GPU's local CPUs that the step allows; say what was done."""
    allowed = set(os.sched_getaffinity(0))
    local = set(cpu_affinity(pre.lib, pre.handles[0])) if pre.lib is not None else set()
    usable = sorted(local & allowed)
    info: dict[str, Any] = {
        "gpu_numa_node": numa_node(pre.gpus[0]["pci_bus_id"]) if pre.gpus else None,
        "local_cpus": len(local),
        "allowed_cpus": len(allowed),
    }
    if not usable:
        info.update(bound=False, why="no CPU is both local to the GPU and allowed to this step")
        return info
    os.sched_setaffinity(0, usable)
    info.update(bound=True, bound_cpus=len(usable), all_local=local <= allowed)
    return info


def measure(torch: Any, pre: Preflight, size: int, repeats: int, warmup_s: float) -> dict[str, Any]:
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    batch = max(1, round(4 * (1 << 30) / size))
    out: dict[str, Any] = {}
    for name, call in (
        ("h2d", lambda: dev.copy_(host, non_blocking=True)),
        ("d2h", lambda: host.copy_(dev, non_blocking=True)),
    ):
        seen: dict[str, Any] = {}
        times = time_batches(
            torch, call, batch=batch, repeats=repeats, warmup_s=warmup_s, during=lambda s=seen: s.update(pre.sample())
        )
        samples = [size / t / 1e9 for t in times]
        out[f"{name}_gbps"] = round(median(samples), 2)
        out[f"{name}_gbps_min"] = round(min(samples), 2)
        out[f"{name}_during"] = seen
    out["pcie_gen_loaded"] = min(
        (v for v in (out["h2d_during"].get("pcie_gen"), out["d2h_during"].get("pcie_gen")) if v is not None),
        default=None,
    )
    out["pcie_width_loaded"] = min(
        (v for v in (out["h2d_during"].get("pcie_width"), out["d2h_during"].get("pcie_width")) if v is not None),
        default=None,
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=1 << 30, help="bytes per copy (e.g. 256M, 1G)")
    parser.add_argument("--repeats", type=int, default=10, help="timed batches per direction (median reported)")
    parser.add_argument("--warmup", type=float, default=0.3, help="seconds of warm-up per direction")
    parser.add_argument("--no-bind", action="store_true", help="do not bind to the GPU's NUMA-local CPUs")
    parser.add_argument("--measure-busy", action="store_true", help="measure even if other processes use the GPU")
    args = parser.parse_args(argv)

    pre = preflight(1)
    data: dict[str, Any] = {"busy": pre.busy, "size": args.size}
    gpu = pre.gpus[0] if pre.gpus else None
    if pre.busy and not args.measure_busy:
        data["skipped"] = "GPU busy: other processes were running on it before the benchmark"
        emit(data, gpu=gpu, probe="hostbw")
        return
    data["numa"] = {"bound": False, "why": "--no-bind"} if args.no_bind else bind_local(pre)
    import torch

    data["torch_bus"] = torch_device_bus(torch)
    data.update(measure(torch, pre, args.size, args.repeats, args.warmup))
    emit(data, gpu=gpu, probe="hostbw")


if __name__ == "__main__":
    main()
