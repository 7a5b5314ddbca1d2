"""The run record's metrics as a pandas table: one row per measured value, for CSV and the report.

The JSON record is what tools read back; the CSV beside it (``reports/runs/<UTC>.metrics.csv`` and
``latest.metrics.csv``) is what an engineer opens in a spreadsheet or loads with ``pandas.read_csv``
to compare runs, pivot by node, or plot a fleet, without writing a JSON walker first.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import is_latest

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["COLUMNS", "csv_path_for", "metrics_frame", "write_metrics_csv"]

#: Column order of the table (extra measurement details follow as ``extra.<key>`` columns).
COLUMNS = (
    "test",
    "metric",
    "node",
    "subject",
    "subject_kind",
    "value",
    "unit",
    "sku",
    "min",
    "max",
    "equal",
    "verdict",
    "reason",
    "source",
    "requirements",
)


def _rows(metrics: Iterable[MetricResult]) -> list[dict[str, Any]]:
    rows = []
    for metric in metrics:
        raw = metric.to_dict()
        row = {column: raw.get(column) for column in COLUMNS}
        row["requirements"] = " ".join(metric.requirements)  # the IDs the check proves, one cell
        for key, value in (raw.get("extra") or {}).items():
            row[f"extra.{key}"] = value if isinstance(value, (int, float, str, bool)) or value is None else str(value)
        rows.append(row)
    return rows


def metrics_frame(metrics: Iterable[MetricResult]) -> pd.DataFrame:
    """Every check of the record as a row (what it is about: ``subject`` and ``subject_kind``)."""
    import pandas as pd

    rows = _rows(metrics)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    extra = sorted(c for c in frame.columns if c not in COLUMNS)
    return frame[list(COLUMNS) + extra]


def csv_path_for(record_path: Path) -> Path:
    """``runs/20261122T002252Z.json`` -> ``runs/20261122T002252Z.metrics.csv``."""
    return record_path.with_name(record_path.stem + ".metrics.csv")


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".metrics-", suffix=".csv")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_metrics_csv(record_path: Path, metrics: Iterable[MetricResult]) -> list[Path]:
    """Write the CSV beside the run record and, when ``latest.json`` is this record (a dry run or a collection
    leaves it alone), refresh ``latest.metrics.csv`` (atomically, like the JSON)."""
    record_path.parent.mkdir(parents=True, exist_ok=True)
    text = metrics_frame(metrics).to_csv(index=False)
    targets = [csv_path_for(record_path)]
    if is_latest(record_path):
        targets.append(record_path.parent / "latest.metrics.csv")
    for target in targets:
        _atomic_write(target, text)
    return targets
