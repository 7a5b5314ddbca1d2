"""GPUDirect RDMA readiness of the node: peermem / DMA-BUF, ACS on the GPU-HCA PCIe path, IOMMU mode.

One task per node (all its GPUs visible). For every NVIDIA GPU on the PCI bus: its nearest
InfiniBand HCA by PCIe path, the ACS Control register of every bridge between them (extended config
space; reading it needs root, as ``lspci -vvv`` does), and the IOMMU group type of GPU and HCA. For
the node: whether ``nvidia_peermem`` (or the legacy ``nv_peer_mem``) is loaded, the kernel release,
whether the NVIDIA module is the open one, and per GPU CUDA's ``CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED``
(ctypes on libcuda; absent on a node without a driver). Nothing is judged here:
``gpuaccept.fabric.gdr`` has the rules and their sources.

By hand: ``python -m gpuaccept.probes.gdr`` (as root for ACS), or ``--sysfs-root fixtures/sysfs/hgx-h100-gdr
--no-cuda`` on a recorded tree.
"""

from __future__ import annotations

import argparse
import ctypes
import os
from pathlib import Path
from typing import Any

from gpuaccept.contracts.fabric import GdrPeermem
from gpuaccept.fabric.gdr import ConfigTooShort, acs_control, bridges_between, nearest
from gpuaccept.probes import _inject
from gpuaccept.probes._pci import chain, gpus, hca_bdf, iommu_type, read_config, read_text
from gpuaccept.probes._protocol import emit

__all__ = ["collect"]

CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124  # cuda.h, CUDA 11.7+
CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 33, 34, 50
PEERMEM_FILES = tuple(GdrPeermem.__annotations__)


def cuda_dmabuf() -> dict[str, Any]:
    """``{"devices": {"0000:18:00": 1, ...}, "error": None}`` from libcuda, or no device and ``error`` why."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"devices": {}, "error": f"libcuda.so.1 not loadable ({exc})"}
    count, value = ctypes.c_int(0), ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return {"devices": {}, "error": "cuInit/cuDeviceGetCount failed"}
    out: dict[str, int] = {}
    for ordinal in range(count.value):
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
            continue
        ids = []
        for attr in (
            CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
            CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
            CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
        ):
            lib.cuDeviceGetAttribute(ctypes.byref(value), attr, dev)
            ids.append(value.value)
        rc = lib.cuDeviceGetAttribute(ctypes.byref(value), CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev)
        out[f"{ids[0]:04x}:{ids[1]:02x}:{ids[2]:02x}"] = value.value if rc == 0 else -1
    return {"devices": out, "error": None}


def _acs(root: Path, bdf: str) -> dict[str, Any]:
    config = read_config(root, bdf)
    if config is None:
        return {"bdf": bdf, "acs_ctl": None, "error": "config space unreadable"}
    try:
        return {"bdf": bdf, "acs_ctl": acs_control(config), "error": None}
    except ConfigTooShort as exc:
        return {"bdf": bdf, "acs_ctl": None, "error": f"{exc}: run as root to read ACS"}


def collect(root: Path = Path("/sys"), proc: Path = Path("/proc"), cuda: bool = True) -> dict[str, Any]:
    """Everything the GPUDirect judges need, as read on this node."""
    root, proc = _inject.gdr_roots(root, proc)  # test hook, off by default (probes/_inject.py)
    ib_dir = root / "class" / "infiniband"
    hcas = {h.name: hca_bdf(root, h.name) for h in sorted(ib_dir.iterdir())} if ib_dir.is_dir() else {}
    hca_chains = {name: chain(root, bdf) for name, bdf in hcas.items() if bdf}
    out_gpus = []
    for bdf in gpus(root):
        gchain = chain(root, bdf)
        near, common = nearest(gchain, hca_chains) if hca_chains else ([], 0)
        paths = []
        for hca in near:
            bridges = bridges_between(gchain, hca_chains[hca])
            paths.append(
                {
                    "hca": hca,
                    "hca_bdf": hcas[hca],
                    "iommu_hca": iommu_type(root, hcas[hca] or ""),
                    "bridges": [_acs(root, b) for b in bridges],
                }
            )
        out_gpus.append(
            {"bdf": bdf, "chain": gchain, "iommu": iommu_type(root, bdf), "shared_prefix": common, "paths": paths}
        )
    version = read_text(proc / "driver" / "nvidia" / "version") or ""
    return _inject.edited(
        "gdr",
        {
            "sysfs_root": str(root),
            "peermem": {f: (root / f).exists() for f in PEERMEM_FILES},
            "kernel": read_text(proc / "sys" / "kernel" / "osrelease"),
            "cmdline_iommu": [t for t in (read_text(proc / "cmdline") or "").split() if "iommu" in t],
            "iommu_devices": sorted(p.name for p in (root / "class" / "iommu").iterdir())
            if (root / "class" / "iommu").is_dir()
            else [],
            "nvidia_open_module": ("Open Kernel Module" in version) if version else None,
            "hcas": hcas,
            "gpus": out_gpus,
            "cuda_dmabuf": cuda_dmabuf() if cuda else {"devices": {}, "error": "not asked (--no-cuda)"},
            "euid": os.geteuid(),
        },
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="sysfs root (a recorded tree in CI)")
    parser.add_argument("--proc-root", type=Path, default=Path("/proc"), help="procfs root")
    parser.add_argument("--no-cuda", action="store_true", help="do not ask libcuda for DMA-BUF support")
    args = parser.parse_args(argv)
    emit(collect(args.sysfs_root, args.proc_root, cuda=not args.no_cuda), probe="gdr")


if __name__ == "__main__":
    main()
