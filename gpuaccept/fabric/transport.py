"""Judge how NCCL moved bytes between nodes: which network plugin, GPUDirect RDMA or not, which HCA.

A cluster can pass every bandwidth floor on a small run and still be wrong underneath: NCCL fell back
to TCP sockets (``NET/Socket``), GPUDirect RDMA is off (no ``/GDRDMA``, every byte bounces through host
memory), or a GPU sends through a NIC across the CPU because its own is down. NCCL says all of it
under ``NCCL_DEBUG=INFO``; ``gpuaccept.nccl.ncclinfo.parse_net_facts`` reads one rank's log into
``{"channels": {plugin: {dev: counts}}, "devices": {plugin: {dev: [names]}}}`` and this module turns
that into the observations thresholds judge:

* ``nccl_net_transport``: the plugin(s) carrying the rank's NET channels (``IB``, ``Socket``, a site's
  plugin such as ``IBext_v8``), or ``none`` when a multi-node rank has no NET channel at all;
* ``nccl_net_gdr``: 1 when every NET channel of the rank is ``/GDRDMA``, else 0;
* ``nccl_net_hca_affinity``: ``affine`` when every HCA the rank's GPU drives itself is one of its
  PCIe-affine HCAs, else the offending HCA(s) and the affine one(s);
* ``nccl_net_hca_used``: per declared compute HCA of a node, 1 if some rank's channels used it.

PXN sends (``NET/IB/3(5)``: relayed through local rank 5's GPU and NIC) count toward coverage of that
NIC but not against the sender's affinity: NCCL chose to hop over NVLink to a better-placed NIC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AFFINE", "NO_NETWORK", "RankTransport", "hca_usage", "observe_rank"]

AFFINE = "affine"
NO_NETWORK = "none"


@dataclass(frozen=True)
class RankTransport:
    """What one rank's NCCL log says about its network path."""

    node: str
    rank: int
    gpu: str | None
    transport: str
    gdr: int | None
    direct: tuple[str, ...]
    relayed: tuple[str, ...]
    affinity: str
    channels: int
    gdr_channels: int
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.node} GPU {self.gpu}" if self.gpu else f"{self.node} rank {self.rank}"


def _device_names(net: Mapping[str, Any], plugin: str, dev: str) -> list[str]:
    names = ((net.get("devices") or {}).get(plugin) or {}).get(str(dev))
    return list(names) if names else [f"{plugin} dev {dev}"]


def observe_rank(
    net: Mapping[str, Any] | None,
    *,
    node: str,
    rank: int,
    gpu: str | None,
    affine: Sequence[str] | None,
    multinode: bool,
) -> RankTransport:
    """The observations for one rank from its parsed NET facts.

    ``affine``: the GPU's PCIe-affine HCAs (None: affinity unknown, not judged; []: the GPU has none).
    ``multinode``: the rank's communicator spans several Slurm nodes, so a rank with no NET channel
    did not use the network at all (NCCL found every peer on its own host, e.g. loopback nodes).
    """
    channels = (net or {}).get("channels") or {}
    plugins = sorted(p for p, devs in channels.items() if devs)
    total = sum(c["send"] + c["recv"] for devs in channels.values() for c in devs.values())
    gdr = sum(c["gdr"] for devs in channels.values() for c in devs.values())
    direct: set[str] = set()
    relayed: set[str] = set()
    for plugin, devs in channels.items():
        for dev, counts in devs.items():
            names = _device_names(net or {}, plugin, dev)
            if counts["recv"] or counts["send"] > counts["pxn"]:
                direct.update(names)
            if counts["pxn"]:
                relayed.update(names)
    if plugins:
        transport = "+".join(plugins)
    else:
        transport = NO_NETWORK if multinode else "intra-node only"
    if not total:
        affinity = "no NCCL network channel"
    elif affine is None:
        affinity = "unknown (no GPU-HCA relations)"
    elif not affine:
        affinity = f"no HCA behind the GPU's PCIe switch (uses {', '.join(sorted(direct))})"
    else:
        wrong = sorted(direct - set(affine))
        affinity = AFFINE if not wrong else f"{', '.join(wrong)} (affine: {', '.join(affine)})"
    return RankTransport(
        node=node,
        rank=rank,
        gpu=gpu,
        transport=transport,
        gdr=(1 if gdr == total else 0) if total else None,
        direct=tuple(sorted(direct)),
        relayed=tuple(sorted(relayed)),
        affinity=affinity,
        channels=total,
        gdr_channels=gdr,
        detail={"gdr_hca": (net or {}).get("gdr_hca"), "dmabuf": (net or {}).get("dmabuf")},
    )


def hca_usage(ranks: Iterable[RankTransport], declared: Mapping[str, Iterable[str]]) -> dict[str, dict[str, int]]:
    """``{node: {hca: 1 if any rank of that node used it (directly or as a PXN relay), else 0}}``.

    Only meaningful for a run that puts a rank on every GPU of the node: a declared HCA no rank
    touched is a rail that is down, mis-cabled, or not visible to NCCL (``NCCL_IB_HCA`` too narrow).
    """
    used: dict[str, set[str]] = {}
    for r in ranks:
        used.setdefault(r.node, set()).update(r.direct, r.relayed)
    return {node: {hca: int(hca in used.get(node, set())) for hca in sorted(hcas)} for node, hcas in declared.items()}
