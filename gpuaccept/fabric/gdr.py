"""GPUDirect RDMA enablement: a kernel path for GPU memory, no ACS redirect between GPU and HCA, no IOMMU translation.

Three things must hold for an HCA to read and write GPU memory directly, and each fails quietly
(NCCL still runs, through host memory, at a fraction of the bandwidth):

* the kernel must let the RDMA stack pin GPU memory: the ``nvidia_peermem`` module (NCCL checks
  ``/sys/module/nvidia_peermem/version``, or the legacy ``/sys/kernel/mm/memory_peers/nv_mem/version``,
  ``src/transport/net_ib/gdr.cc``) or DMA-BUF, which the GPU reports as
  ``CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`` (NCCL ``src/init.cc`` ``dmaBufSupported``);
* PCIe Access Control Services must not redirect peer-to-peer requests on the switch ports between GPU
  and HCA (NCCL User Guide, Troubleshooting, "PCI Access Control Services (ACS)": with ACS on, "all
  PCI point-to-point traffic" goes "to the CPU root complex, causing a significant performance
  reduction or even a hang"; the fix writes 0 to ``ECAP_ACS+0x6``, the ACS Control register);
* the IOMMU must not translate the GPU's and HCA's DMA (CUDA "GPUDirect RDMA" guide, Supported
  Systems, IOMMUs: GPUDirect RDMA "is incompatible with IOMMUs performing any form of translation
  other than 1:1, hence they must be disabled or configured for pass-through"): the IOMMU group's
  ``type`` must be ``identity`` (or there is no group: IOMMU off), not ``DMA``/``DMA-FQ``.

Pure functions on what the ``gdr`` probe read: config-space bytes, bridge chains, group types; the
readings are judged by ``verdicts.fabric.judge_gdr``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.contracts.fabric import GdrPayload
from gpuaccept.fabric.affinity import bus_key

__all__ = [
    "ACS_CAP_ID",
    "ACS_FLAGS",
    "TRANSLATING",
    "ConfigTooShort",
    "Observation",
    "acs_control",
    "acs_flags",
    "bridges_between",
    "nearest",
    "observations",
]

ACS_CAP_ID = 0x000D
_EXT_START = 0x100
#: ACS Control register bits (PCIe Base Spec, ACS Extended Capability), as ``lspci -vvv`` names them.
ACS_FLAGS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
#: IOMMU group types that translate DMA addresses (the kernel's ``iommu_group/type`` spellings).
TRANSLATING = frozenset({"DMA", "DMA-FQ"})


class ConfigTooShort(ValueError):
    """The config space read stops before the extended capabilities (non-root readers get 64 bytes)."""


def acs_control(config: bytes) -> int | None:
    """The ACS Control register of a device, None when it has no ACS capability.

    Walks the extended capability list from offset 0x100 (each header: ID 16 bits, version 4,
    next offset 12). ``ConfigTooShort`` when ``config`` ends before 0x104: the caller could not read
    the extended space (it needs root), which is not the same as "no ACS".
    """
    if len(config) < _EXT_START + 4:
        raise ConfigTooShort(f"{len(config)} bytes of config space (extended capabilities start at 0x100)")
    offset, seen = _EXT_START, set()
    while offset and offset not in seen and offset + 4 <= len(config):
        seen.add(offset)
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        cap_id, nxt = header & 0xFFFF, (header >> 20) & 0xFFC
        if cap_id == ACS_CAP_ID:
            if offset + 8 > len(config):
                raise ConfigTooShort(f"config space ends inside the ACS capability at {offset:#x}")
            (control,) = struct.unpack_from("<H", config, offset + 6)
            return int(control)
        offset = nxt
    return None


def acs_flags(control: int) -> list[str]:
    """The enabled ACS Control bits by name (``lspci``'s ``ACSCtl: SrcValid+ ReqRedir+ ...``)."""
    return [name for bit, name in enumerate(ACS_FLAGS) if control & (1 << bit)]


def nearest(gpu_chain: Sequence[str], candidates: Mapping[str, Sequence[str]]) -> tuple[list[str], int]:
    """Candidates sharing the longest PCI path prefix with the GPU, and that prefix's length.

    A prefix of 3 or more (root complex, root port, switch port) means a shared PCIe switch.
    """
    best, names = -1, []
    for name, other in candidates.items():
        common = 0
        for a, b in zip(gpu_chain, other, strict=False):
            if a != b:
                break
            common += 1
        if common > best:
            best, names = common, [name]
        elif common == best:
            names.append(name)
    return sorted(names), max(best, 0)


def bridges_between(a: Sequence[str], b: Sequence[str]) -> list[str]:
    """Bridges a peer-to-peer packet from device ``a`` to ``b`` passes: the deepest shared one and each
    side's ports below it (endpoints and the root complex itself excluded), in path order."""
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    shared = [a[common - 1]] if common else []
    return [p for p in shared + list(a[common:-1]) + list(b[common:-1]) if not p.startswith("pci")]


@dataclass(frozen=True)
class Observation:
    """One reading: ``metric`` = ``value`` on ``gpu`` (the GPU and the HCA it pairs with); ``why`` says why
    it could not be read (then ``value`` is None: "could not measure", never a pass)."""

    metric: str
    value: Any
    gpu: str
    extra: dict[str, Any] = field(default_factory=dict)
    why: str | None = None


def observations(data: GdrPayload) -> list[Observation]:
    """The readings of the ``gdr`` probe's data, per GPU and its nearest HCA(s).

    * ``gdr_kernel_support`` 1 when nvidia_peermem is loaded or CUDA reports DMA-BUF for the GPU;
    * ``pcie_acs_ctl`` the ACS Control register of each bridge between GPU and HCA (no ACS capability
      reads 0: such a bridge cannot redirect);
    * ``iommu_translation`` 1 when the GPU's or the HCA's IOMMU group translates (DMA, DMA-FQ).

    A reading that could not be taken (config space without root, libcuda missing while peermem is
    absent too) comes with its ``why``: the caller records it unreadable, never as a pass.
    """
    out: list[Observation] = []
    peermem = sorted(f for f, present in data["peermem"].items() if present)
    cuda = data["cuda_dmabuf"]
    for gpu in data["gpus"]:
        hcas = [p["hca"] for p in gpu["paths"]]
        label = f"{gpu['bdf']} -> {'/'.join(hcas) or 'no HCA'}"
        key = bus_key(gpu["bdf"])
        flag = cuda["devices"][key] if key in cuda["devices"] else None
        if peermem or flag == 1:
            out.append(Observation("gdr_kernel_support", 1, label, {"peermem": peermem, "dmabuf": flag}))
        elif cuda["error"] is not None:
            why = f"no nvidia_peermem, and DMA-BUF support unknown ({cuda['error']})"
            out.append(Observation("gdr_kernel_support", None, label, why=why))
        else:
            out.append(Observation("gdr_kernel_support", 0, label, {"peermem": "not loaded", "dmabuf": flag}))
        types = {"gpu": gpu["iommu"]} | {f"hca {p['hca']}": p["iommu_hca"] for p in gpu["paths"]}
        if any(t in (None, "unreadable") for t in types.values()):
            out.append(Observation("iommu_translation", None, label, why=f"IOMMU group type unreadable ({types})"))
        else:
            translating = int(any(t in TRANSLATING for t in types.values()))
            out.append(Observation("iommu_translation", translating, label, {"groups": types}))
        for path in gpu["paths"]:
            for bridge in path["bridges"]:
                where = f"{label} via bridge {bridge['bdf']}"
                if bridge["error"] is not None:
                    out.append(Observation("pcie_acs_ctl", None, where, why=bridge["error"]))
                    continue
                control = bridge["acs_ctl"]
                value = 0 if control is None else int(control)
                extra = {"flags": acs_flags(value), "acs_capability": control is not None}
                out.append(Observation("pcie_acs_ctl", value, where, extra))
    return out
