"""A folder of run records read as a history: one row per run, oldest first.

The idle re-validation (slurm/revalidate.sbatch) writes each node's runs into a folder of its own
(``reports/history/<node>/``), so that folder is the node's history; ``reports/runs/`` is the
cluster's. The summary shows the rows under "History"; nothing here judges, it reads the verdicts
the records hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuaccept.results.record import RecordError, RunRecord, read_record

__all__ = ["MAX_RUNS", "HistoryRow", "history"]

#: The newest this many records of a folder are read (a record can hold megabytes of checks).
MAX_RUNS = 30


@dataclass(frozen=True)
class HistoryRow:
    """One run: when, how it ended, its counts, and the tests that did not pass."""

    started: str
    status: str
    counts: dict[str, int]
    nodes: list[str]
    not_passed: list[str]
    name: str

    @property
    def passed(self) -> bool:
        return self.status == "passed" and not self.not_passed


def _row(path: Path, record: RunRecord) -> HistoryRow:
    bad = [
        f"{t.nodeid.split('::')[-1]}: {t.verdict}" for t in record.tests.values() if t.verdict in ("failed", "error")
    ]
    return HistoryRow(
        started=record.started.isoformat()[:19].replace("T", " "),
        status=record.status,
        counts=record.counts,
        nodes=list(record.cluster.get("nodes") or []),
        not_passed=bad,
        name=path.name,
    )


def history(folder: Path, limit: int = MAX_RUNS) -> list[HistoryRow]:
    """The runs recorded in ``folder`` (``latest.json`` and unreadable files aside), oldest first."""
    if not folder.is_dir():
        return []
    paths = [p for p in folder.glob("*.json") if p.name != "latest.json" and not p.name.startswith(".")]
    paths.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    rows: list[HistoryRow] = []
    for path in paths[:limit]:
        try:
            rows.append(_row(path, read_record(path)))
        except RecordError:
            continue
    rows.sort(key=lambda r: r.started)
    return rows
