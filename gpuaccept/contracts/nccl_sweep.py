"""Message-size sweeps, memory caps, and the per-group table built from probe records.

The probe and the tests must agree on the sizes (every rank of a communicator has to run the same
collective with the same count, or it hangs), so the sweep is computed here, in one place, from
``--min-bytes/--max-bytes/--factor`` the way nccl-tests' ``-b/-e/-f`` do, plus the maximum itself
so "up to 8 GiB" really measures 8 GiB.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import TypeAdapter

from gpuaccept.contracts.nccl_formulas import COLLECTIVES, algbw_gbs, bus_factor, effective_bytes, memory_per_rank
from gpuaccept.contracts.nccl_payloads import FirstWrong, NcclRecord, NcclRow
from gpuaccept.units import parse_bytes

__all__ = [
    "GroupTable",
    "Row",
    "algo_args",
    "cap_sizes",
    "format_bytes",
    "group_tables",
    "nccl_payload",
    "parse_bytes",
    "requested_sizes",
    "sweep_sizes",
]

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))

_NCCL_RECORD: TypeAdapter[NcclRecord] = TypeAdapter(NcclRecord)


def algo_args(*, gpu: bool, multinode: bool, forced_ring: bool) -> list[str]:
    """``["--ring"]`` (NCCL_ALGO=Ring) wherever the floor being judged is a Ring figure, else ``[]``.

    The multi-node floors (busbw per node and per rail) come from NVIDIA's "46-48 GB/s per NIC" for
    NDR 400, measured with ``NCCL_ALGO=RING`` at 2 nodes (nccl-tests issue #290); with NCCL's own
    choice at 2 nodes, Tree's busbw can exceed the per-NIC bound (nccl-tests #196), so one degraded NIC
    could still clear the floor. Multi-node GPU passes therefore always run Ring: measured the way the
    floor was. ``forced_ring`` (``--nccl-ring``) forces it on the intra-node sweep too. gloo (CPU
    nodes) has no algorithm to choose and ignores the variable.
    """
    return ["--ring"] if forced_ring or (gpu and multinode) else []


def format_bytes(size: int) -> str:
    """``4294967296`` -> ``4 GiB``; sizes that are not whole units keep one decimal."""
    for name, unit in _UNITS:
        if size >= unit:
            value = size / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{size} B"


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """``min, min*f, min*f^2, ...`` up to ``max`` (nccl-tests ``-f``), and ``max`` itself if it was skipped."""
    if min_bytes <= 0 or max_bytes <= 0:
        raise ValueError("sizes must be positive")
    if min_bytes > max_bytes:
        raise ValueError(f"min {min_bytes} is larger than max {max_bytes}")
    if factor < 2:
        raise ValueError(f"factor must be 2 or more, not {factor}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sizes


def cap_sizes(sizes: Sequence[int], collective: str, nranks: int, free_bytes: int, fraction: float = 0.75) -> list[int]:
    """The sizes whose buffers fit in ``fraction`` of the free memory (the rest is NCCL's and the checks')."""
    budget = free_bytes * fraction
    return [s for s in sizes if memory_per_rank(collective, s, nranks) <= budget]


@dataclass(frozen=True)
class Row:
    """One (collective, size) of one group: nccl-tests' columns plus correctness per rank."""

    collective: str
    size: int
    nranks: int
    time_us: float
    algbw: float
    busbw: float
    rank_time_us: dict[int, float]
    wrong: dict[int, int]
    first_wrong: dict[int, FirstWrong]

    @property
    def ok(self) -> bool:
        return not any(self.wrong.values())


@dataclass
class GroupTable:
    """The sweep of one communicator: its nodes, ranks, and rows by collective."""

    group: int
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]
    rows: list[Row] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "+".join(self.nodes)

    def by_collective(self, collective: str) -> list[Row]:
        return sorted((r for r in self.rows if r.collective == collective), key=lambda r: r.size)

    def largest(self, collective: str) -> Row | None:
        """The row at the largest size measured for ``collective`` (what thresholds judge)."""
        rows = self.by_collective(collective)
        return rows[-1] if rows else None

    def at(self, collective: str, size: int) -> Row | None:
        return next((r for r in self.rows if r.collective == collective and r.size == size), None)

    def wrong_results(self) -> list[tuple[str, int, int, int, FirstWrong | None]]:
        """``(collective, size, rank, wrong elements, first wrong)`` for every rank that got a wrong result."""
        return [
            (row.collective, row.size, rank, count, row.first_wrong.get(rank))
            for row in self.rows
            for rank, count in sorted(row.wrong.items())
            if count
        ]


def group_tables(records: Iterable[Any]) -> list[GroupTable]:
    """Per-group tables from the probe's rank records (``RankRecord``-like: ``.rank`` and the typed ``.payload``
    that ``probes.specs.NCCL`` validated where the result arrived; a record not yet validated is here).

    The time of a size is the mean over the group's ranks of each rank's median loop time: nccl-tests
    averages the per-rank time the same way (``-a 1``, its default), then applies the formulas.
    """
    tables: dict[int, GroupTable] = {}
    samples: dict[tuple[int, str, int], dict[int, NcclRow]] = {}
    for record in records:
        typed = nccl_payload(record)
        comm = typed["communicator"]
        if comm["outcome"] != "in_group":
            continue
        gid = comm["group"]
        if gid not in tables:
            info: dict[str, Any] = {**typed, **comm}
            tables[gid] = GroupTable(gid, tuple(comm["group_nodes"]), tuple(comm["group_ranks"]), info=info)
        for result in comm["results"]:
            samples.setdefault((gid, result["collective"], result["bytes"]), {})[int(record.rank)] = result
    for (gid, collective, size), per_rank in samples.items():
        table = tables[gid]
        nranks = len(table.ranks)
        times = {rank: r["time_us"] for rank, r in per_rank.items()}
        mean_us = statistics.fmean(times.values()) if times else float("nan")
        ok_time = mean_us == mean_us and mean_us > 0
        algbw = algbw_gbs(size, mean_us / 1e6) if ok_time else float("nan")
        table.rows.append(
            Row(
                collective=collective,
                size=size,
                nranks=nranks,
                time_us=mean_us,
                algbw=algbw,
                busbw=algbw * bus_factor(collective, nranks) if ok_time else float("nan"),
                rank_time_us=times,
                wrong={rank: r["wrong"] for rank, r in per_rank.items()},
                first_wrong={rank: first for rank, r in per_rank.items() if (first := r["first_wrong"]) is not None},
            )
        )
    for table in tables.values():
        order = {c: i for i, c in enumerate(COLLECTIVES)}
        table.rows.sort(key=lambda r: (order.get(r.collective, 99), r.size))
    return [tables[g] for g in sorted(tables)]


def nccl_payload(record: Any) -> NcclRecord:
    """``record``'s typed ``nccl`` payload: the one validated where its result arrived (``RankRecord.payload``),
    else its ``data`` validated here against ``NcclRecord`` (a record a selftest or benchmark built by hand)."""
    typed = getattr(record, "payload", None)
    return cast(NcclRecord, typed) if typed is not None else _NCCL_RECORD.validate_python(record.data)


def requested_sizes(collective: str, sizes: Sequence[int], nranks: int, elem_size: int = 4) -> list[int]:
    """The sweep rounded the way nccl-tests rounds it for ``collective`` on ``nranks`` ranks (deduplicated)."""
    out: list[int] = []
    for size in sizes:
        eff = effective_bytes(collective, size, nranks, elem_size)
        if eff > 0 and eff not in out:
            out.append(eff)
    return out
