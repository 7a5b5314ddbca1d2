"""The NCCL steps the fabric tests launch, planned: the transport check's one all-reduce, and the rail steps
(one communicator per rail, all at once; a failing rail's nodes again in pairs).

Why here: which ranks a step starts, which sweep it measures and how its tables are named follow from what
the nodes declare (GPUs per node) and the session's sweep options, nothing else; kept beside the rails
(``gpuaccept.fabric.rails``) a selftest holds them without a cluster (``tests/selftest/test_fabric_plan.py``),
and the test only says which nodes run a step and which judge reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuaccept.contracts.nccl_sweep import GroupTable, algo_args, nccl_payload
from gpuaccept.contracts.records import RankRecord
from gpuaccept.fabric.affinity import bus_key

__all__ = [
    "CPU_RAILS",
    "CPU_SWEEP",
    "TRANSPORT_ARGS",
    "RailStep",
    "SweepOptions",
    "name_rail_tables",
    "rail_figures",
    "rail_hcas",
    "rail_step",
]

#: gloo ranks per CPU node: two rails
CPU_RAILS = 2
#: the sweep on CPU nodes: small messages, few iterations (gloo on CI's 2-core loopback cluster)
CPU_SWEEP: tuple[str, ...] = ("--min-bytes=64K", "--max-bytes=1M", "--iters=5", "--warmup=2")
#: the transport check's step: one all-reduce large enough to open NET channels on every HCA, five times
TRANSPORT_ARGS: tuple[str, ...] = (
    "--collectives=all_reduce",
    "--min-bytes=64M",
    "--max-bytes=64M",
    "--iters=5",
    "--trials=1",
)


class SweepOptions(Protocol):
    """What of the session's settings a rail step's sweep reads (``gpuaccept.settings``)."""

    @property
    def nccl_min_bytes(self) -> int: ...

    @property
    def nccl_max_bytes(self) -> int: ...

    @property
    def nccl_ring(self) -> bool: ...


@dataclass(frozen=True)
class RailStep:
    """One rail step's ranks and the ``nccl`` probe's arguments."""

    tasks_per_node: int
    gpus_per_task: int
    args: tuple[str, ...]


def _sweep(options: SweepOptions, gpu: bool) -> list[str]:
    if not gpu:
        return list(CPU_SWEEP)
    # the rail floors are Ring figures (nccl-tests #290): measured the way they were (algo_args)
    ring = algo_args(gpu=True, multinode=True, forced_ring=options.nccl_ring)
    return [f"--min-bytes={options.nccl_min_bytes}", f"--max-bytes={options.nccl_max_bytes}", *ring]


def rail_step(
    gpus: int, options: SweepOptions, collectives: Sequence[str], groups: str = "", rails: str = "all"
) -> RailStep:
    """The rail step on nodes with ``gpus`` GPUs each (0: CPU nodes, ``CPU_RAILS`` gloo ranks): every rail at
    once, or ``rails`` of the node pairs in ``groups`` (a second pass)."""
    tasks, gpt = (gpus, 1) if gpus else (CPU_RAILS, 0)
    args = [*_sweep(options, bool(gpt)), f"--collectives={','.join(collectives)}", f"--rails={rails}"]
    if groups:
        args.append(f"--groups={groups}")
    return RailStep(tasks, gpt, tuple(args))


def name_rail_tables(tables: Iterable[GroupTable], records: Sequence[RankRecord]) -> None:
    """Each rail's table told its rail, each node's rail GPU and how its ranks are named in a failure
    (``rank 3 (node2 rail 1)``), from the ranks' records of the step."""
    comms = [(r, nccl_payload(r)["communicator"]) for r in records]
    by_gid = {c["group"]: c["rail"] for _, c in comms if c["outcome"] == "in_group"}
    for table in tables:
        table.info["rail"] = by_gid.get(table.group)
        table.info["gpus"] = {
            r.node: r.gpu for r, c in comms if c["outcome"] == "in_group" and c["group"] == table.group
        }
        rail = by_gid.get(table.group)
        table.info["labels"] = {r.rank: f"rank {r.rank} ({r.node} rail {rail})" for r in records}


def rail_hcas(table: GroupTable, affinity: Mapping[str, Mapping[str, list[str]]]) -> dict[str, str | None]:
    """``{node: HCA}``: the HCA each node's rail GPU is PCIe-affine to (None: no GPU, or none known)."""
    out: dict[str, str | None] = {}
    for node in table.nodes:
        gpu: dict[str, Any] | None = table.info["gpus"].get(node)
        hcas = affinity.get(node, {}).get(bus_key(gpu["pci_bus_id"])) if gpu else None
        out[node] = hcas[0] if hcas else None
    return out


def rail_figures(table: GroupTable, collectives: Sequence[str]) -> str:
    """The rail's busbw at its largest size, per collective: ``all_reduce 46.100 GB/s, ...``."""
    return ", ".join(f"{c} {row.busbw:.3f} GB/s" for c in collectives if (row := table.largest(c)))
