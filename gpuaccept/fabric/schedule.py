"""Who tests which HCA with whom: perftest pairs in rounds, ports, and the second pass for suspects.

Every HCA of every node must move RDMA traffic to another node, all at once across the allocation,
and never carry two tests at the same time (two tests on one port halve each other and the slower
one looks broken). Nodes are paired around a ring (node *i* with node *i+1*); the ring's edges are
split into rounds of disjoint pairs (two rounds for an even node count, three for an odd one), and
in each pair HCA *k* of one node tests HCA *k* of the other (the same rail: on a rail-optimised
fabric both hang off the same leaf switch). Every HCA is tested in each round it takes part in, so
each meets two partners, which is what tells "this HCA is slow" from "its partner was".

A failing test makes both its ends suspects; the second pass pairs each suspect with an HCA that
passed (same rail first, on another node); the fabric judge (``gpuaccept.verdicts.fabric.blame``) convicts an
end that fails with a trusted partner (the node-level rule of the NCCL second pass applied to HCAs).

``PerftestPlan`` holds one run's plan: each node's HCAs, the first pass's rounds, what they leave untested,
and the second pass its verdicts call for. Each round is one ``perftest`` step on the nodes it names
(``round_nodes``, ``round_args``); a pair that lost a node before its round is left out of it (``without_lost``).

Ports: the server end listens on ``base + rail index`` for ``ib_write_bw`` and ``+ PORT_SPAN`` for
``ib_write_lat``; an HCA serves at most one test per round, so no two servers on a node share a port.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "PORT_SPAN",
    "Pairing",
    "PerftestPlan",
    "assignments",
    "first_pass",
    "format_plan",
    "parse_plan",
    "ring_rounds",
    "round_args",
    "round_nodes",
    "second_pass",
    "untested",
    "without_lost",
]

Endpoint = tuple[str, str]
#: Port offset between the bandwidth and the latency server of one HCA, and the second-pass offset.
PORT_SPAN = 64


@dataclass(frozen=True, order=True)
class Pairing:
    """One perftest: ``server`` listens on ``port``, ``client`` connects; ``(node, hca)`` each."""

    server: Endpoint
    client: Endpoint
    port: int

    @property
    def lat_port(self) -> int:
        return self.port + PORT_SPAN

    def label(self) -> str:
        return f"{self.server[0]} {self.server[1]} <-> {self.client[0]} {self.client[1]}"


def ring_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """The ring's node pairs in rounds of disjoint pairs: ``[(n0,n1),(n2,n3)], [(n1,n2),(n3,n0)]``."""
    n = len(nodes)
    if n < 2:
        return []
    edges = list(dict.fromkeys(tuple(sorted((i, (i + 1) % n))) for i in range(n)))
    rounds: list[list[tuple[int, int]]] = []
    for a, b in edges:
        for batch in rounds:
            if all(a not in e and b not in e for e in batch):
                batch.append((a, b))
                break
        else:
            rounds.append([(a, b)])
    return [[(nodes[a], nodes[b]) for a, b in batch] for batch in rounds]


def first_pass(hcas: Mapping[str, Sequence[str]], base_port: int = 18515) -> list[list[Pairing]]:
    """Rounds of rail-aligned pairings over the node ring (``hcas``: node -> its compute HCAs in order)."""
    out = []
    for batch in ring_rounds(list(hcas)):
        tests = []
        for a, b in batch:
            for k, (ha, hb) in enumerate(zip(hcas[a], hcas[b], strict=False)):
                tests.append(Pairing((a, ha), (b, hb), base_port + k))
        out.append(tests)
    return out


def untested(hcas: Mapping[str, Sequence[str]], rounds: Sequence[Sequence[Pairing]]) -> list[Endpoint]:
    """Endpoints no round tests (a node whose neighbours lack that rail, or a single node)."""
    seen = {e for batch in rounds for p in batch for e in (p.server, p.client)}
    return [(node, hca) for node, names in hcas.items() for hca in names if (node, hca) not in seen]


def _rail(hcas: Mapping[str, Sequence[str]], end: Endpoint) -> int:
    return list(hcas[end[0]]).index(end[1])


def second_pass(
    results: Mapping[Pairing, bool], hcas: Mapping[str, Sequence[str]], base_port: int = 18515
) -> list[list[Pairing]]:
    """Each suspect end (in a failed test) against a trusted end (only in passed tests), in rounds.

    A trusted partner on the same rail and another node is preferred, then any trusted partner on
    another node. Suspects with no trusted partner at all are paired with each other (different
    nodes) so a pass can still clear them. Ports use ``base_port + 2 * PORT_SPAN + rail``.
    """
    failed = {e for p, ok in results.items() if not ok for e in (p.server, p.client)}
    good = [e for p, ok in results.items() if ok for e in (p.server, p.client) if e not in failed]
    good = list(dict.fromkeys(good))
    partners_of = {
        e: {p.client if p.server == e else p.server for p in results if e in (p.server, p.client)} for e in failed
    }
    tests: list[Pairing] = []
    for suspect in sorted(failed):
        rail = _rail(hcas, suspect)
        candidates = [g for g in good if g[0] != suspect[0] and g not in partners_of[suspect]]
        candidates.sort(key=lambda g: (_rail(hcas, g) != rail, g))
        if not candidates:
            candidates = [s for s in sorted(failed) if s[0] != suspect[0] and s not in partners_of[suspect]]
        if candidates:
            partner = candidates[0]
            tests.append(Pairing(partner, suspect, base_port + 2 * PORT_SPAN + _rail(hcas, partner)))
    rounds: list[list[Pairing]] = []
    for test in tests:
        for batch in rounds:
            busy = {e for p in batch for e in (p.server, p.client)}
            if test.server not in busy and test.client not in busy:
                batch.append(test)
                break
        else:
            rounds.append([test])
    return rounds


def assignments(batch: Sequence[Pairing]) -> dict[str, list[tuple[str, Pairing]]]:
    """``{node: [(role, pairing), ...]}``: what each task of the round's step does, by local task id.

    Endpoints are ordered by HCA name so every task computes the same table from the same plan.
    """
    out: dict[str, list[tuple[str, Pairing]]] = {}
    for p in batch:
        out.setdefault(p.server[0], []).append(("server", p))
        out.setdefault(p.client[0], []).append(("client", p))
    for items in out.values():
        items.sort(key=lambda item: (item[1].server[1] if item[0] == "server" else item[1].client[1], item[0]))
    return out


def format_plan(batch: Sequence[Pairing]) -> str:
    """``node1/mlx5_0>node2/mlx5_0@18515,...``: the round as one probe argument."""
    return ",".join(f"{p.server[0]}/{p.server[1]}>{p.client[0]}/{p.client[1]}@{p.port}" for p in batch)


def parse_plan(text: str) -> list[Pairing]:
    """Inverse of ``format_plan``; a malformed entry raises ``ValueError`` naming it."""
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            ends, port = entry.rsplit("@", 1)
            server, client = ends.split(">")
            s_node, s_hca = server.split("/")
            c_node, c_hca = client.split("/")
            out.append(Pairing((s_node, s_hca), (c_node, c_hca), int(port)))
        except ValueError:
            raise ValueError(f"bad perftest plan entry {entry!r} (expected node/hca>node/hca@port)") from None
    return out


def round_nodes(batch: Sequence[Pairing]) -> list[str]:
    """The nodes a round's step runs on: every node with an end in it, sorted."""
    return sorted({end[0] for p in batch for end in (p.server, p.client)})


def round_args(batch: Sequence[Pairing], gpu_memory: bool) -> list[str]:
    """The ``perftest`` probe's arguments for a round: its plan, and GPU memory where GPUDirect RDMA is expected."""
    return [f"--plan={format_plan(batch)}"] + (["--gpu-memory"] if gpu_memory else [])


def without_lost(batch: Sequence[Pairing], lost: Collection[str]) -> list[Pairing]:
    """The round's pairings whose two nodes are both still in the run."""
    return [p for p in batch if p.server[0] not in lost and p.client[0] not in lost]


@dataclass(frozen=True)
class PerftestPlan:
    """Who tests which HCA with whom on the nodes with InfiniBand: ``hcas`` (node -> its compute HCAs, sorted)
    and the first pass's ``rounds``."""

    hcas: dict[str, list[str]]
    rounds: list[list[Pairing]]

    @classmethod
    def of(cls, rates: Mapping[str, Mapping[str, float]], nodes: Sequence[str]) -> PerftestPlan:
        """The plan over ``nodes``' compute HCAs (``rates``: node -> {HCA: Gb/s})."""
        hcas = {n: sorted(rates[n]) for n in nodes}
        return cls(hcas, first_pass(hcas))

    @property
    def bare(self) -> list[str]:
        """The nodes without a compute HCA (where the SKU expects InfiniBand: a finding, not a pass)."""
        return [n for n in self.hcas if not self.hcas[n]]

    @property
    def untested(self) -> list[Endpoint]:
        """The HCAs no round of the first pass tests."""
        return untested(self.hcas, self.rounds)

    def second(self, verdicts: Mapping[Pairing, bool]) -> list[list[Pairing]]:
        """The second pass the first pass's ``verdicts`` call for: each suspect against a trusted end."""
        return second_pass(verdicts, self.hcas)
