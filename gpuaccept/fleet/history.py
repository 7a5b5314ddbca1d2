"""A folder of run records read as a history: one row per run, oldest first.

The idle re-validation (slurm/revalidate.sbatch) writes each node's runs into a folder of its own
(``reports/history/<node>/``), so that folder is the node's history; ``reports/runs/`` is the
cluster's. The summary shows the rows under "History"; nothing here judges, it reads the verdicts
the records hold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _row(path: Path, record: dict[str, Any]) -> HistoryRow:
    tests = record.get("tests") or []
    bad = [
        f"{str(t.get('nodeid', '')).split('::')[-1]}: {t.get('verdict')}"
        for t in tests
        if t.get("verdict") in ("failed", "error")
    ]
    return HistoryRow(
        started=str(record.get("started", ""))[:19].replace("T", " "),
        status=str(record.get("status", "?")),
        counts={str(k): int(v) for k, v in (record.get("counts") or {}).items()},
        nodes=list((record.get("cluster") or {}).get("nodes") or []),
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
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and str(record.get("schema", "")).startswith("gpuaccept.run/"):
            rows.append(_row(path, record))
    rows.sort(key=lambda r: r.started)
    return rows
