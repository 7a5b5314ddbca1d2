"""InfiniBand HCAs and ports of the node, read from sysfs (/sys/class/infiniband), no ibstat needed.

One task per node. For every HCA: type, firmware, board id, NUMA node, PCI address; for every port:
state, phys_state, rate, link_layer and every error/traffic counter under ``counters/``. Values are
passed on as the kernel writes them (``"4: ACTIVE"``, ``"400 Gb/sec (4X NDR)"``); the test parses and
judges them (``gpuaccept.verdicts.infiniband``), so a recorded tree and a live node go through the same code.

``--sysfs-root`` (default ``/sys``) lets CI and operators point the probe at a recorded tree such as
``fixtures/sysfs/hgx-h100-ndr``. A node without ``class/infiniband`` reports ``present: false``.

Counter windows (``gpuaccept.fabric.counters``): every reading carries ``sampled_at`` (wall clock) and
``monotonic`` seconds, so two runs bracket a window (by hand: run it twice). Every reading is the one shape,
``contracts.fabric.InfinibandPayload``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from gpuaccept.probes import _inject
from gpuaccept.probes._pci import read_text
from gpuaccept.probes._protocol import emit

__all__ = ["collect"]

HCA_FILES = ("node_type", "hca_type", "fw_ver", "board_id", "node_guid")
PORT_FILES = ("state", "phys_state", "rate", "link_layer", "lid", "sm_lid")


def _counter(path: Path) -> int | str | None:
    raw = read_text(path)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return raw


def _pci(device: Path) -> str | None:
    """The HCA's PCI address: the ``device`` symlink's target, or PCI_SLOT_NAME in its uevent."""
    real = os.path.realpath(device)
    if ":" in Path(real).name:
        return Path(real).name
    uevent = read_text(device / "uevent") or ""
    for line in uevent.splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.split("=", 1)[1]
    return None


def collect(sysfs_root: Path = Path("/sys")) -> dict[str, Any]:
    """Every HCA and port under ``<root>/class/infiniband`` as raw sysfs strings and integer counters."""
    sysfs_root = _inject.sysfs_root(sysfs_root)  # test hook, off by default (probes/_inject.py)
    base = sysfs_root / "class" / "infiniband"
    stamp = {"sampled_at": time.time(), "monotonic": time.monotonic()}
    if not base.is_dir():
        return {"present": False, "path": str(base), "hcas": {}, **stamp}
    hcas: dict[str, Any] = {}
    for dev in sorted(base.iterdir()):
        hca: dict[str, Any] = {key: read_text(dev / key) for key in HCA_FILES}
        numa = read_text(dev / "device" / "numa_node")
        hca["numa_node"] = int(numa) if numa not in (None, "") and numa.lstrip("-").isdigit() else None
        hca["pci"] = _pci(dev / "device")
        ports: dict[str, Any] = {}
        ports_dir = dev / "ports"
        port_dirs = list(ports_dir.iterdir()) if ports_dir.is_dir() else []
        port_dirs.sort(key=lambda p: int(p.name) if p.name.isdigit() else 0)
        for port in port_dirs:
            entry: dict[str, Any] = {key: read_text(port / key) for key in PORT_FILES}
            counters_dir = port / "counters"
            entry["counters"] = (
                {c.name: _counter(c) for c in sorted(counters_dir.iterdir()) if c.is_file()}
                if counters_dir.is_dir()
                else {}
            )
            ports[port.name] = entry
        hca["ports"] = ports
        hcas[dev.name] = hca
    return {"present": True, "path": str(base), "hcas": hcas, **stamp}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="sysfs root (a recorded tree in CI)")
    args = parser.parse_args(argv)
    emit(collect(args.sysfs_root), probe="infiniband")


if __name__ == "__main__":
    main()
