"""Which HCA each GPU should use, and what the fabric of a node can carry, from the node's own readings.

GPUDirect RDMA moves data between a GPU and an HCA over PCIe; it is fast when both hang off one PCIe
switch (``PIX``/``PXB`` in ``nvidia-smi topo -m``), which is how HGX boards pair each GPU with its
own NIC. NCCL picks that NIC itself; a GPU whose traffic leaves through another one crosses the CPU
and halves its bandwidth. The ``nvlink`` probe reports every GPU's PCIe relation to every HCA; the
GPU's *affine* HCAs are those at its best relation, when that relation is a shared switch.

The line rate of a node's fabric (what a uniformly slow fabric is judged against) is the sum of the
rates sysfs reports for the compute HCAs its GPUs use, in GB/s (Gb/s / 8): 8 x NDR 400 = 400 GB/s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.contracts.fabric import InfinibandPayload
from gpuaccept.contracts.ib import parse_rate, parse_state

__all__ = ["LOCAL_RELATIONS", "affine_hcas", "bus_key", "compute_hcas", "group_line_rate_gbs", "line_rate_gbs"]

#: PCIe relations that mean "behind the same PCIe switch" (GPUDirect RDMA without crossing the CPU).
LOCAL_RELATIONS = ("PIX", "PXB")
_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS", "unknown")


def bus_key(bus_id: str) -> str:
    """``00000000:9A:00.0`` / ``0000:9a:00.0`` / ``9a:00.0`` -> ``0000:9a:00`` (domain, bus, device)."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    domain, bus, rest = parts[-3], parts[-2], parts[-1]
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}"


def affine_hcas(nvlink: Mapping[str, Any], compute: Iterable[str] | None = None) -> dict[str, list[str]]:
    """``{gpu bus key: [HCA, ...]}``: each GPU's HCAs at its best relation if that is PIX/PXB, else [].

    ``nvlink`` is the ``nvlink`` probe's data (``gpus[].pci_bus_id``, ``gpus[].nics[{name, relation}]``);
    ``compute`` restricts the candidates to the compute fabric's HCAs (a storage NIC may sit closer).
    """
    allowed = set(compute) if compute is not None else None
    out: dict[str, list[str]] = {}
    for gpu in nvlink.get("gpus") or []:
        nics = [n for n in gpu.get("nics") or [] if allowed is None or n.get("name") in allowed]
        rank = {n["name"]: _ORDER.index(n.get("relation", "unknown")) for n in nics if n.get("name")}
        best = min(rank.values(), default=len(_ORDER))
        out[bus_key(str(gpu.get("pci_bus_id", "0:0:0.0")))] = (
            sorted(name for name, r in rank.items() if r == best) if best < len(LOCAL_RELATIONS) else []
        )
    return out


def compute_hcas(ib: InfinibandPayload, link_layer: str | None) -> dict[str, float]:
    """``{hca: Gb/s}`` of the node's compute HCAs (``infiniband`` probe data) whose first ACTIVE port
    has ``link_layer`` (None: any); an HCA with no active port is left out (it carries nothing)."""
    out: dict[str, float] = {}
    for name, hca in sorted(ib["hcas"].items()):
        for port in hca["ports"].values():
            if link_layer is not None and port["link_layer"] != link_layer:
                continue
            rate = parse_rate(port["rate"])
            if parse_state(port["state"]) == "ACTIVE" and rate:
                out[name] = rate
                break
    return out


def line_rate_gbs(rates: Mapping[str, float], used: Iterable[str] | None = None) -> float:
    """GB/s the HCAs in ``used`` (default: all in ``rates``) carry at line rate, one direction."""
    names = list(rates) if used is None else [h for h in used if h in rates]
    return sum(rates[h] for h in names) / 8.0


def group_line_rate_gbs(rates: Mapping[str, Mapping[str, float]]) -> float | None:
    """The line rate a multi-node group's busbw is judged against: its slowest node's HCAs, in GB/s.

    ``rates``: node -> {hca: Gb/s} (``compute_hcas``), all of each node's compute HCAs. None when a node has
    no compute HCA (no fabric).
    """
    lines = [line_rate_gbs(r) for r in rates.values()]
    return min(lines) if lines and all(lines) else None
