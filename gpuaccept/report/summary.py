"""``reports/summary.html``: the acceptance summary, one self-contained page built from a run record.

Written at the end of every session that wrote a run record (the report plugin) and by
``gpuaccept-report`` (``--summary-only --record reports/runs/X.json`` rebuilds it from a record alone,
e.g. one fetched from a GPU machine). The page is rendered by Jinja2 from ``templates/summary.html.j2``
with inline CSS and matplotlib charts as ``data:`` URIs: it opens offline, from a mail attachment,
and loads nothing from anywhere.

What changed since an earlier run is shown against the ``--baseline`` of the session when one was
given (its regressions are verdicts, decided by the judging core), else against the previous run
record in the same folder, for information only. Either way the run records stay the source of
truth: this page is a view of them and can be rebuilt from them at any time.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuaccept.fleet.history import history
from gpuaccept.judging.baseline import Baseline, fingerprint_diff, summarize_changes
from gpuaccept.report.charts import gpus, loss, nccl
from gpuaccept.report.render import data_uri, fmt, render
from gpuaccept.report.summary_margins import margin_rows
from gpuaccept.report.summary_model import overview
from gpuaccept.report.summary_nvlink import nvlink_blocks
from gpuaccept.report.summary_requirements import requirement_rows
from gpuaccept.report.summary_storage import storage_columns, storage_rows
from gpuaccept.results.comparison import Comparison, comparison_of, side_by_side
from gpuaccept.results.record import RecordError, RunRecord, read_record
from gpuaccept.signing.files import drop_signature, sign_file
from gpuaccept.thresholds.requirements import load_catalogue

if TYPE_CHECKING:
    from gpuaccept.signing.keys import SigningKey
    from gpuaccept.thresholds.loader import Thresholds

__all__ = [
    "Changes",
    "SummaryError",
    "build_summary",
    "changes_since",
    "load_record",
    "previous_record",
    "record_thresholds",
    "write_summary",
]

#: At most this many moved figures are listed (largest moves first); the CSV beside the record has all.
MAX_MOVED = 300
#: A folder of records is searched this far back for the previous run.
MAX_CANDIDATES = 50


class SummaryError(Exception):
    """A record that cannot be summarised (the message names the file and what is wrong)."""


def load_record(path: Path) -> RunRecord:
    """A gpuaccept run record, or ``SummaryError`` saying why this file is not one."""
    try:
        return read_record(path)
    except RecordError as exc:
        raise SummaryError(str(exc)) from None


def previous_record(record_path: Path, record: RunRecord) -> Path | None:
    """The newest other run record in the same folder that started before this one (latest.json aside)."""
    started = record.started
    if not record_path.parent.is_dir():
        return None
    candidates = [
        p
        for p in record_path.parent.glob("*.json")
        if p.name != "latest.json" and not p.name.startswith(".") and p.resolve() != record_path.resolve()
    ]
    candidates.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    best: tuple[_dt.datetime, Path] | None = None
    for path in candidates[:MAX_CANDIDATES]:
        try:
            other = load_record(path).started
        except SummaryError:
            continue
        if other < started and (best is None or other > best[0]):
            best = (other, path)
    return None if best is None else best[1]


def record_thresholds(record: RunRecord) -> Thresholds | None:
    """The thresholds the record was judged by (its files, when still there), else the packaged ones.

    Only the direction (higher or lower is better) and the tolerance of each figure are read from
    them, to say which figures moved beyond tolerance; the verdicts are the record's own.
    """
    from gpuaccept.thresholds.loader import load_thresholds

    files = [Path(f) for f in record.thresholds.get("files") or []]
    try:
        if files and all(f.is_file() for f in files):
            return load_thresholds(files[1] if len(files) > 1 else None, defaults=files[0])
        return load_thresholds()
    except Exception:  # a usage error in an old file must not stop a report: fall back to defaults
        try:
            return load_thresholds()
        except Exception:
            return None


@dataclass
class Changes:
    """What differs from an earlier run: versions on the nodes, and figures beyond their tolerance."""

    name: str
    started: str
    given: bool
    versions: list[str]
    groups: list[dict[str, Any]]
    moved: list[dict[str, Any]]
    counts: dict[str, int] = field(default_factory=dict)
    more: int = 0


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return value


_STATUS_ORDER = {"regressed": 0, "changed": 1, "improved": 2}


def _groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per (figure, status): on how many nodes and GPUs, by how much, with one example."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((str(row["metric"]), str(row["status"])), []).append(row)
    out: list[dict[str, Any]] = []
    for (metric, status), found in grouped.items():
        deltas = [float(r["delta_pct"]) for r in found if r.get("delta_pct") is not None]
        nodes = sorted({str(r["node"]) for r in found})
        gpus = [r for r in found if r.get("subject") is not None]
        example = max(found, key=lambda r: abs(r.get("delta_pct") or 0.0))
        where = f"{example['node']}" + (f" GPU {example['subject']}" if example.get("subject") is not None else "")
        unit = example.get("unit") or ""
        out.append(
            {
                "metric": metric,
                "status": status,
                "count": len(found),
                "nodes": nodes,
                "gpus": len(gpus),
                "low": min(deltas) if deltas else None,
                "high": max(deltas) if deltas else None,
                "tolerance": found[0].get("tolerance_pct"),
                "example": f"{where}: {fmt(example.get('baseline'))} -> {fmt(example.get('now'))} {unit}",
            }
        )
    out.sort(key=lambda g: (_STATUS_ORDER.get(g["status"], 3), -max(abs(g["low"] or 0), abs(g["high"] or 0))))
    return out


def changes_since(
    record: RunRecord, baseline: RunRecord, path: Path, thresholds: Thresholds | None, *, given: bool
) -> Changes:
    """Versions (``driver 550 -> 570 on node1``) and the figures that regressed, improved or changed.

    A record judged against this very baseline carries each comparison on its checks (the judge made
    it); against any other earlier record the figures are compared here, through the same
    ``Baseline.compare``, for information only (no verdict changes)."""
    base = Baseline(baseline, path, thresholds)
    metrics = record.metrics
    carried = [comparison_of(m) for m in metrics]
    comparisons: dict[int, Comparison | None] | None = None
    if not any(c is not None and c.file == base.name for c in carried):
        comparisons = {id(m): base.compare(m) for m in metrics}
    frame = side_by_side(metrics, base.not_measured(metrics), comparisons)
    # an expectation's value is what the test compared, not a figure of the hardware (a fresh file's hash)
    expectations = {m.metric for m in metrics if m.kind == "expectation"}
    frame = frame[~frame["metric"].isin(expectations)]
    counts = {str(k): int(v) for k, v in frame["status"].value_counts().items()} if not frame.empty else {}
    moved = frame[frame["status"].isin(list(_STATUS_ORDER))]
    rows = [{k: _cell(v) for k, v in row.items()} for row in moved.to_dict(orient="records")]
    rows.sort(key=lambda r: (_STATUS_ORDER.get(str(r["status"]), 3), -abs(r.get("delta_pct") or 0.0)))
    versions = summarize_changes(fingerprint_diff(base.fingerprints, record.fingerprints))
    return Changes(
        name=base.name,
        started=base.started,
        given=given,
        versions=versions,
        groups=_groups(rows),
        moved=rows[:MAX_MOVED],
        counts=counts,
        more=max(0, len(rows) - MAX_MOVED),
    )


def build_summary(
    record: RunRecord,
    *,
    record_path: Path | None = None,
    reports_dir: Path | None = None,
    baseline: tuple[RunRecord, Path, bool] | None = None,
    thresholds: Thresholds | None = None,
    cluster_name: str | None = None,
    signed_by: str | None = None,
) -> str:
    """The page as HTML. ``baseline`` is (record, path, given with --baseline); ``reports_dir`` holds
    ``training/`` (loss curves) and ``nccl/`` (the sweep plots, shown when the record has no curves);
    ``signed_by`` is the fingerprint of the key that signs the page and its record (shown on it)."""
    view = overview(record, cluster_name=cluster_name)
    metrics = record.metrics
    if thresholds is None:
        thresholds = record_thresholds(record)
    catalogue = thresholds.metrics if thresholds is not None else {}
    panels = gpus.heat_panels(metrics, catalogue)
    heatmap = data_uri(gpus.heatmap_png(panels)) if panels else None
    scales = [s for s in nccl.nccl_scales(metrics, catalogue) if s.series]  # a scale whose checks had no sweep
    busbw = [{"title": s.title, "curves": s.curves, "png": data_uri(nccl.nccl_png(s))} for s in scales]
    since = record.started.timestamp()
    sweep_pngs: list[dict[str, str]] = []
    if reports_dir is not None and scales and not all(s.curves for s in scales):
        for png in sorted((reports_dir / "nccl").glob("*.png")) if (reports_dir / "nccl").is_dir() else []:
            if since is None or png.stat().st_mtime >= since:
                sweep_pngs.append({"title": png.stem, "png": data_uri(png.read_bytes())})
    runs = loss.loss_runs(reports_dir / "training", since) if reports_dir is not None else []
    runs = runs or loss.loss_runs_from_checks(metrics, catalogue)
    curves = data_uri(loss.loss_png(runs, loss.loss_target(metrics, catalogue))) if runs else None
    changes = None
    if baseline is not None:
        changes = changes_since(record, baseline[0], baseline[1], thresholds, given=baseline[2])
    tests = list(record.tests.values())
    by_test = {entry.nodeid: entry.checks for entry in record.tests.values()}
    storage = storage_rows(metrics)
    return render(
        "summary.html.j2",
        view=view,
        record_path=str(record_path) if record_path is not None else "",
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        heatmap=heatmap,
        key_figures=[title for p in panels for _metric, title, _unit in p.columns],
        nccl=busbw,
        sweep_pngs=sweep_pngs,
        loss=curves,
        loss_runs=[r.label for r in runs],
        changes=changes,
        tests=tests,
        checks=by_test,
        requirements=requirement_rows(record, load_catalogue()),
        margins=margin_rows(metrics, catalogue),
        storage=storage,
        storage_columns=storage_columns(storage),
        nvlink_blocks=nvlink_blocks(metrics),
        duration_s=record.duration_s,
        history=history(record_path.parent) if record_path is not None else [],
        signed_by=signed_by,
    )


def write_summary(
    path: Path, html: str, *, signer: SigningKey | None = None, rendered_from: Path | None = None
) -> Path:
    """Write atomically (a browser or a CI upload never reads half a page); then sign it with ``signer``,
    naming the record it was ``rendered_from``, or drop the signature of the page it replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name of its own: two runs finishing at once in one reports folder each write their page whole, and
    # the later one stands (one shared temporary name let the first rename take the second's file away)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-", suffix=".tmp")
    os.fchmod(fd, 0o644)  # a page to hand on, readable as a plain write leaves it (mkstemp makes it 0600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(html)
    Path(name).replace(path)
    if signer is not None:
        sign_file(path, signer, "summary", rendered_from=rendered_from)
    else:
        drop_signature(path)
    return path
