"""The acceptance summary's storage panel: each declared filesystem's figures per node beside its contract.

A storage contract is a few figures (GB/s read and written by one node, by all nodes at once); the panel puts what
each node measured beside them (fio alone and together, the checkpoint's save and restore, the fine-tune's own
checkpoint and merged weights, the cold start to the first token), so a reader sees at once which node's client is
slow and how the aggregate compares. Read from the run record alone (the checks carry the filesystem's name, the
limit and its source); it never judges.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuaccept.results.metrics import MetricResult

__all__ = ["COLUMNS", "StorageRow", "storage_columns", "storage_rows"]

#: the panel's columns: (title, the checks it shows), in the order a reader asks about them; a node-local
#: scratch filesystem's figures (``scratch_*``) sit in the same columns as a shared one's
COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("write alone", ("storage_write_gbps", "scratch_write_gbps")),
    ("read alone", ("storage_read_gbps", "scratch_read_gbps")),
    ("write, all nodes", ("storage_aggregate_write_gbps",)),
    ("read, all nodes", ("storage_aggregate_read_gbps",)),
    ("checkpoint save", ("checkpoint_save_gbps",)),
    ("checkpoint restore", ("checkpoint_restore_gbps",)),
    ("fine-tune checkpoint save", ("train_checkpoint_save_gbps",)),
    ("fine-tune checkpoint restore", ("train_checkpoint_restore_gbps",)),
    ("merged weights save", ("model_weights_save_gbps",)),
    ("cold start to first token", ("model_cold_start_gbps",)),
)
_COLUMN_OF = {check: title for title, checks in COLUMNS for check in checks}


@dataclass
class StorageRow:
    """One filesystem on one node (``node`` is ``all nodes`` for the aggregates): column title -> (GB/s, limit
    text, verdict)."""

    filesystem: str
    path: str
    node: str
    cells: dict[str, tuple[float, str, str]] = field(default_factory=dict)


def storage_rows(metrics: Iterable[MetricResult]) -> list[StorageRow]:
    """A row per filesystem and node, in the order the checks were made (a node measured twice keeps its worst
    judged figure; a figure shown unjudged, such as the small model's checkpoint beside the 7B's, only where no
    judged one is)."""
    rows: dict[tuple[str, str], StorageRow] = {}
    for m in metrics:
        column = _COLUMN_OF.get(m.metric)
        if column is None or not isinstance(m.value, (int, float)):
            continue
        name = str(m.extra.get("filesystem") or "")
        node = "all nodes" if m.metric.startswith("storage_aggregate_") else m.node
        row = rows.setdefault((name, node), StorageRow(name, m.subject or "", node))
        old = row.cells.get(column)
        rank = (m.verdict == "info", float(m.value))
        if old is None or rank < (old[2] == "info", old[0]):
            row.cells[column] = (float(m.value), m.limit_text(), m.verdict)
    return sorted(rows.values(), key=lambda r: (r.filesystem, r.node == "all nodes", r.node))


def storage_columns(rows: list[StorageRow]) -> list[str]:
    """The column titles some row has a figure in (a run without a checkpoint shows no checkpoint columns)."""
    return [title for title, _ in COLUMNS if any(title in row.cells for row in rows)]
