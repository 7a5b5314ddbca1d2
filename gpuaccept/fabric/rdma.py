"""The perftest probe's per-node records turned into one result per HCA pair, and the figures judged.

Both ends of a test report (perftest prints the bandwidth report on the server side too); the
client's numbers are the ones judged, the server's fill in if the client's output was lost. A test
with no figure from either end failed to run over the fabric (the QPs would not connect, the peer
timed out): that is a finding about the pair, kept with perftest's own reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuaccept.fabric.schedule import Pairing

__all__ = ["PairResult", "missing_tools", "pair_results"]


@dataclass
class PairResult:
    """What one HCA pair measured: Gb/s average write bandwidth, p99 write latency (us), memory used."""

    pairing: Pairing
    bw_gbps: float | None = None
    lat_p99_us: float | None = None
    lat_typical_us: float | None = None
    memory: str | None = None
    errors: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.bw_gbps is not None and self.lat_p99_us is not None


def _pairing(node: str, endpoint: Mapping[str, Any]) -> Pairing:
    partner_node, partner_hca = str(endpoint["partner"]).split("/", 1)
    me, other = (node, str(endpoint["hca"])), (partner_node, partner_hca)
    server, client = (me, other) if endpoint["role"] == "server" else (other, me)
    return Pairing(server, client, int(endpoint["port"]))


def pair_results(records: Iterable[Any]) -> dict[Pairing, PairResult]:
    """``{pairing: PairResult}`` from ``RankRecord``-like records (``.node``, ``.data``) of one or more rounds."""
    ends: dict[Pairing, dict[str, Mapping[str, Any]]] = {}
    for record in records:
        for endpoint in record.data.get("endpoints") or []:
            ends.setdefault(_pairing(record.node, endpoint), {})[str(endpoint["role"])] = endpoint
    out: dict[Pairing, PairResult] = {}
    for pairing, sides in sorted(ends.items()):
        result = PairResult(pairing)
        for role in ("client", "server"):
            side = sides.get(role)
            if side is None:
                result.errors.append(f"{role} end reported nothing")
                continue
            bw, lat = side.get("bw") or {}, side.get("lat") or {}
            if result.bw_gbps is None and bw.get("average_gbps") is not None:
                result.bw_gbps = float(bw["average_gbps"])
            if result.lat_p99_us is None and lat.get("p99") is not None:
                result.lat_p99_us, result.lat_typical_us = float(lat["p99"]), float(lat["t_typical"])
            if role == "client":
                result.memory = side.get("memory")
            if side.get("error"):
                node = pairing.server[0] if role == "server" else pairing.client[0]
                result.errors.append(f"{role} {node}: {side['error']}")
        out[pairing] = result
    return out


def missing_tools(records: Iterable[Any]) -> dict[str, str]:
    """``{node: "ib_write_bw, ib_write_lat (hint)"}`` for nodes that could not run perftest at all."""
    return {
        r.node: f"{', '.join(r.data['missing'])} not found ({r.data.get('hint', '')})"
        for r in records
        if r.data.get("missing")
    }
