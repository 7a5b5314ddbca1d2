"""PCI devices as sysfs shows them: GPUs, HCAs, the bridge chain above each, config space, IOMMU group.

Probe-side helpers (plain file reads under ``--sysfs-root``), shared by the ``gdr`` and ``perftest`` probes
(``read_text`` by the ``infiniband`` probe too). ``/sys/bus/pci/devices/<bdf>`` is a symlink into
``/sys/devices/pci<dom>:<bus>/<root port>/<switch port>/.../<bdf>``: the path *is* the PCIe tree, so two
devices' common prefix is the bridge they meet at. A recorded tree uses the same relative links, so CI reads
it exactly as a node's /sys.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["chain", "gpus", "hca_bdf", "iommu_type", "read_config", "read_text"]

_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
NVIDIA = "0x10de"


def read_text(path: Path) -> str | None:
    """A sysfs or procfs file's text, stripped; None when it cannot be read (absent on this kernel or device)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def chain(root: Path, bdf: str) -> list[str]:
    """``["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"]`` for a device."""
    real = os.path.realpath(root / "bus" / "pci" / "devices" / bdf)
    parts = Path(real).parts
    return [p for p in parts if (p.startswith("pci") and ":" in p) or _BDF.match(p)]


def gpus(root: Path) -> list[str]:
    """NVIDIA 3D/VGA controllers (class 0x0302xx / 0x0300xx) on the PCI bus, by address."""
    base = root / "bus" / "pci" / "devices"
    out = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        vendor, klass = read_text(dev / "vendor"), read_text(dev / "class") or ""
        if vendor == NVIDIA and klass.startswith(("0x0302", "0x0300")):
            out.append(dev.name)
    return out


def hca_bdf(root: Path, hca: str) -> str | None:
    """The PCI address of ``/sys/class/infiniband/<hca>``: its ``device`` link, or PCI_SLOT_NAME in uevent."""
    device = root / "class" / "infiniband" / hca / "device"
    name = Path(os.path.realpath(device)).name
    if _BDF.match(name):
        return name
    for line in (read_text(device / "uevent") or "").splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1]
    return None


def read_config(root: Path, bdf: str) -> bytes | None:
    """The device's config space as the kernel lets this user read it (64 bytes unless root)."""
    try:
        return (root / "bus" / "pci" / "devices" / bdf / "config").read_bytes()
    except OSError:
        return None


def iommu_type(root: Path, bdf: str) -> str:
    """``identity``, ``DMA``, ``DMA-FQ``... of the device's IOMMU group; ``none`` without a group (IOMMU off)."""
    group = root / "bus" / "pci" / "devices" / bdf / "iommu_group"
    if not group.exists():
        return "none"
    return read_text(group / "type") or "unreadable"
