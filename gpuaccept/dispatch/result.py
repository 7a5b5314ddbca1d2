"""What a probe step gives back, and the strict parsing of its sentinel lines.

The parse is where "never pass on missing data" is enforced for every probe at once: a non-zero exit,
a signal, a malformed line, a duplicated rank, or fewer ranks than launched raises ``ProbeError``
naming the probe, the nodes and the reason, with the tail of stderr for the operator.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field

from gpuaccept.contracts.records import RankRecord
from gpuaccept.errors import ProbeError
from gpuaccept.probes._protocol import PART_SENTINEL, SENTINEL

__all__ = ["ProbeResult", "RankRecord", "check_step", "describe_exit", "parse_records", "reported_ranks"]


@dataclass
class ProbeResult:
    """A finished step: the exact command, its output and the per-rank records."""

    probe: str
    command: list[str]
    nodes: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    records: list[RankRecord] = field(default_factory=list)

    def by_node(self) -> dict[str, list[RankRecord]]:
        grouped: dict[str, list[RankRecord]] = {}
        for record in self.records:
            grouped.setdefault(record.node, []).append(record)
        return grouped

    def one(self) -> RankRecord:
        if len(self.records) != 1:
            raise ProbeError(f"probe {self.probe}: expected one rank, got {len(self.records)}", nodes=self.nodes)
        return self.records[0]


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _tail(text: str, lines: int = 15) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n    ".join(kept) if kept else "(empty)"


def _joined_lines(probe: str, stdout: str, where: str, nodes: tuple[str, ...]) -> list[str]:
    """Output lines with every rank's numbered parts joined back into one result line."""
    lines: list[str] = []
    parts: dict[int, dict[int, str]] = {}
    totals: dict[int, int] = {}
    for line in stdout.splitlines():
        if PART_SENTINEL.strip() not in line:
            lines.append(line)
            continue
        try:
            rank_text, count, text = line.split(PART_SENTINEL.strip(), 1)[1].strip().split(" ", 2)
            index, total = (int(x) for x in count.split("/"))
            rank = int(rank_text)
        except ValueError:
            raise ProbeError(f"probe {probe} on {where}: malformed result part: {line[:200]!r}", nodes=nodes) from None
        parts.setdefault(rank, {})[index] = text
        totals[rank] = total
    for rank, pieces in sorted(parts.items()):
        if sorted(pieces) != list(range(1, totals[rank] + 1)):
            raise ProbeError(
                f"probe {probe} on {where}: rank {rank} sent parts {sorted(pieces)} of {totals[rank]}", nodes=nodes
            )
        lines.append(SENTINEL + "".join(pieces[i] for i in sorted(pieces)))
    return lines


def parse_records(probe: str, stdout: str, expected_ranks: int, nodes: tuple[str, ...]) -> list[RankRecord]:
    """Every rank's record, or ``ProbeError`` saying which line or rank is wrong."""
    records: dict[int, RankRecord] = {}
    where = ", ".join(nodes)
    for number, line in enumerate(_joined_lines(probe, stdout, where, nodes), 1):
        if SENTINEL.strip() not in line:
            continue
        payload = line.split(SENTINEL.strip(), 1)[1].strip()
        try:
            raw = json.loads(payload)
            record = RankRecord(
                node=str(raw["node"]),
                rank=int(raw["rank"]),
                world_size=int(raw["world_size"]),
                local_rank=int(raw.get("local_rank", 0)),
                gpu=raw.get("gpu"),
                data=dict(raw["data"]),
                test_hooks={str(k): str(v) for k, v in (raw.get("test_hooks") or {}).items()},
                ran_in=raw.get("ran_in") if isinstance(raw.get("ran_in"), dict) else None,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ProbeError(
                f"probe {probe} on {where}: malformed result line {number}: {exc}: {payload[:200]!r}", nodes=nodes
            ) from None
        if record.rank in records:
            raise ProbeError(f"probe {probe} on {where}: rank {record.rank} reported twice", nodes=nodes)
        records[record.rank] = record
    if len(records) != expected_ranks:
        missing = sorted(set(range(expected_ranks)) - set(records))
        raise ProbeError(
            f"probe {probe} on {where}: {len(records)} of {expected_ranks} ranks reported"
            + (f" (missing ranks {missing})" if missing else ""),
            nodes=nodes,
        )
    return [records[rank] for rank in sorted(records)]


def reported_ranks(stdout: str) -> set[int]:
    """Ranks that printed a well-formed line so far (for naming the ones a hang left behind)."""
    ranks: set[int] = set()
    for line in stdout.splitlines():
        if PART_SENTINEL.strip() in line:
            try:
                ranks.add(int(line.split(PART_SENTINEL.strip(), 1)[1].split()[0]))
            except (ValueError, IndexError):
                pass
            continue
        if SENTINEL.strip() in line:
            try:
                ranks.add(int(json.loads(line.split(SENTINEL.strip(), 1)[1])["rank"]))
            except (ValueError, KeyError, TypeError):
                continue
    return ranks


def check_step(result: ProbeResult, expected_ranks: int) -> ProbeResult:
    """Turn a finished step into records, or raise naming what went wrong where."""
    where = ", ".join(result.nodes)
    if result.returncode != 0:
        error = ProbeError(
            f"probe {result.probe} on {where}: {describe_exit(result.returncode)}\n"
            f"  stderr:\n    {_tail(result.stderr)}",
            nodes=result.nodes,
        )
        error.result = result  # type: ignore[attr-defined]  # the report attaches the full output
        raise error
    result.records = parse_records(result.probe, result.stdout, expected_ranks, result.nodes)
    return result
