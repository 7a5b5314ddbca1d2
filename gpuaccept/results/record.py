"""The run record: one JSON per session with fingerprints, every test's verdict and every metric.

Written at session end whatever the ending (pass, failure, Ctrl-C, SIGTERM, a node dying), to
``reports/runs/<UTC>.json`` (or ``--run-record``) and copied to ``latest.json`` beside it, atomically,
so a baseline comparison never reads half a file.
"""

from __future__ import annotations

import datetime as _dt
import filecmp
import json
import os
import re
import statistics
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaccept.results.metrics import MetricResult

__all__ = ["SCHEMA", "RecordError", "RunRecord", "TestEntry", "is_latest", "read_record", "record_id"]

#: The record's layout. 4: the session's ``verdict`` and ``accepted``, the ``test_hooks`` that were set
#: (``gpuaccept.selftest_hooks``), the limits a site file ``loosened`` against the packaged ones and the
#: ``suite`` that judged (version, commit, edited); 3: a check compared with a ``--baseline`` carries the
#: comparison (``extra.baseline``: value, file, delta_pct, tolerance_pct, better, status); 2: metrics
#: name ``subject`` + ``subject_kind`` (1: ``gpu`` + ``extra.component``). Older ones are migrated on
#: read; a newer one is refused (this gpuaccept cannot know what its fields mean).
SCHEMA = "gpuaccept.run/4"
_SCHEMA_PREFIX = "gpuaccept.run/"
_SCHEMA_VERSION = int(SCHEMA.removeprefix(_SCHEMA_PREFIX))
#: what a record written before ``gpuaccept.run/4`` says of the suite that judged it
UNKNOWN_SUITE: dict[str, Any] = {"version": None, "commit": "unknown", "edited": "unknown"}


_XDIST_GROUP = re.compile(r"@(?:node-[^@\s]+|all-nodes)$")


def record_id(nodeid: str) -> str:
    """A test's id in the run record: without the ``@<group>`` pytest-xdist appends under ``--dist
    loadgroup`` for the groups gpuaccept sets, so records, baselines and reports name a test the same
    way with and without xdist."""
    return _XDIST_GROUP.sub("", nodeid)


def _utc_stamp(moment: _dt.datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%SZ")


@dataclass
class TestEntry:
    """One test's outcome as the record and the report show it."""

    __test__ = False  # not a pytest test class, whatever its name

    nodeid: str
    verdict: str = "not run"
    duration_s: float = 0.0
    message: str = ""
    nodes: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    #: node -> what its probe steps ran in, from every rank's line (``probes/container.py``): the image's
    #: marker and runtime, or "host", and the Python; the proof that a step ran inside the image
    ran_in: dict[str, str] = field(default_factory=dict)
    #: every probe step the test ran: its time limit, how the limit follows from the step's plan, the step's
    #: wall and their ratio (a healthy launch keeps within two thirds of its limit)
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: why it did not pass: could not measure, regression, hardware fault, drift, threshold miss
    category: str | None = None
    #: every check the test made: what was observed, what was expected, the source and the verdict
    checks: list[dict[str, Any]] = field(default_factory=list)
    #: verdict "not run" because a tool is missing: ``{"check", "tool", "detail"}`` (``Judge.tool_missing``)
    not_run: dict[str, str] | None = None
    #: category "suite error": the exception of ours that ended the test ``{"type", "where", "message"}``
    suite_error: dict[str, str] | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TestEntry:
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


@dataclass
class RunRecord:
    """Everything one session learned; ``write`` is safe to call from any ending."""

    started: _dt.datetime = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc))
    settings: dict[str, Any] = field(default_factory=dict)
    cluster: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    fingerprints: dict[str, Any] = field(default_factory=dict)
    tests: dict[str, TestEntry] = field(default_factory=dict)
    metrics: list[MetricResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    status: str = "running"
    #: the pytest command line of the session (what a calibrated limit's source cites)
    command: str = ""
    #: when the session ended (set when the record is written, or read back)
    finished: _dt.datetime | None = None
    #: the schema the record was written with (a record read back keeps its own; migrated on read)
    schema: str = SCHEMA
    #: every test hook set during the run (``gpuaccept.selftest_hooks``): name -> {"value", "where": [...]}
    test_hooks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: every limit a site file sets looser than the packaged one: metric, sku, bound, packaged, site, file
    loosened: list[dict[str, Any]] = field(default_factory=list)
    #: the suite that judged: its version, commit and whether its tracked files were edited
    suite: dict[str, Any] = field(default_factory=lambda: dict(UNKNOWN_SUITE))
    #: the session verdict as the summary states it (``judging.verdict``), set when the record is written
    verdict: str = ""
    accepted: bool = False

    def hook_seen(self, name: str, value: str, where: str) -> None:
        """Note that test hook ``name`` was set (to ``value``) at ``where`` (the login node, a probe's node)."""
        entry = self.test_hooks.setdefault(name, {"value": value, "where": []})
        if where not in entry["where"]:
            entry["where"].append(where)

    def merge_hooks(self, hooks: Mapping[str, Mapping[str, Any]]) -> None:
        """Another process's ``test_hooks`` (an xdist worker's) into this record's."""
        for name, hook in list(hooks.items()):
            for where in list(hook.get("where") or []):
                self.hook_seen(name, str(hook.get("value", "")), where)

    @property
    def counts(self) -> dict[str, int]:
        """How many tests ended with each verdict."""
        counts: dict[str, int] = {}
        for entry in self.tests.values():
            counts[entry.verdict] = counts.get(entry.verdict, 0) + 1
        return counts

    @property
    def duration_s(self) -> float | None:
        if self.finished is None:
            return None
        return round((self.finished - self.started).total_seconds(), 3)

    def test(self, nodeid: str) -> TestEntry:
        return self.tests.setdefault(nodeid, TestEntry(nodeid))

    def run_medians(self) -> dict[str, float]:
        """Run-wide median of every numeric metric (what stragglers are compared with across nodes)."""
        values: dict[str, list[float]] = {}
        for m in self.metrics:
            if isinstance(m.value, (int, float)) and not isinstance(m.value, bool):
                values.setdefault(m.metric, []).append(float(m.value))
        return {name: statistics.median(vals) for name, vals in values.items()}

    def to_dict(self) -> dict[str, Any]:
        finished = self.finished or _dt.datetime.now(_dt.timezone.utc)
        return {
            "schema": SCHEMA,
            "started": self.started.isoformat(),
            "finished": finished.isoformat(),
            "duration_s": round((finished - self.started).total_seconds(), 3),
            "status": self.status,
            "verdict": self.verdict,
            "accepted": self.accepted,
            "test_hooks": self.test_hooks,
            "loosened": self.loosened,
            "suite": self.suite,
            "command": self.command,
            "counts": self.counts,
            "settings": self.settings,
            "cluster": self.cluster,
            "thresholds": self.thresholds,
            "fingerprints": self.fingerprints,
            "tests": [vars(entry) for entry in self.tests.values()],
            "metrics": [m.to_dict() for m in self.metrics],
            "run_medians": self.run_medians(),
            "errors": self.errors,
        }

    def default_path(self, reports_dir: Path, job_id: str | None = None) -> Path:
        """``reports/runs/<UTC start>[-job<id>].json``; ``write(unique=True)`` adds ``-2``, ``-3`` to a name
        another run already took (two runs started in the same second)."""
        job = f"-job{job_id}" if job_id else ""
        return reports_dir / "runs" / f"{_utc_stamp(self.started)}{job}.json"

    def write(self, path: Path, *, latest: bool = True, unique: bool = False) -> Path:
        """Write atomically to ``path`` (with ``unique``, to the first of ``path``, ``<stem>-2``, ... no run
        has taken, claimed with an exclusive create) and, with ``latest``, refresh ``latest.json`` beside it."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.finished = _dt.datetime.now(_dt.timezone.utc)
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False, default=str)
        claimed = _claim(path) if unique else None
        path = claimed or path
        for target in (path, path.parent / "latest.json") if latest else (path,):
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".record-", suffix=".json")
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(text)
                os.replace(tmp, target)
            except OSError:  # a full disk: no half file, and no empty name claimed for nothing
                Path(tmp).unlink(missing_ok=True)
                if claimed is not None and target == claimed and claimed.stat().st_size == 0:
                    claimed.unlink(missing_ok=True)
                raise
        return path

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], path: Path | str = "run record") -> RunRecord:
        """A record from its JSON, every check a ``MetricResult`` and every test a ``TestEntry``; records
        of ``gpuaccept.run/1`` and ``/2`` are migrated (``MetricResult.from_dict``), ``/3`` gets the
        fields of ``/4`` as unknown (no hook recorded, the suite ``unknown``; the verdict is worked out
        again by whoever reads it). The one place a record's JSON becomes objects: the baseline, the
        summary, Allure, the CSV and calibration read this."""
        try:
            started = _time(raw.get("started"))
            tests = [TestEntry.from_dict(t) for t in raw.get("tests") or [] if isinstance(t, dict) and t.get("nodeid")]
            metrics = [MetricResult.from_dict(dict(m)) for m in raw.get("metrics") or []]
        except (TypeError, ValueError) as exc:
            raise RecordError(f"{path} is not a readable run record: {exc}") from None
        return cls(
            started=started or _dt.datetime.fromtimestamp(0, _dt.timezone.utc),
            settings=dict(raw.get("settings") or {}),
            cluster=dict(raw.get("cluster") or {}),
            thresholds=dict(raw.get("thresholds") or {}),
            fingerprints=dict(raw.get("fingerprints") or {}),
            tests={t.nodeid: t for t in tests},
            metrics=metrics,
            errors=[str(e) for e in raw.get("errors") or []],
            status=str(raw.get("status") or "unknown"),
            command=str(raw.get("command") or ""),
            finished=_time(raw.get("finished")),
            schema=str(raw.get("schema") or SCHEMA),
            test_hooks={str(k): dict(v) for k, v in (raw.get("test_hooks") or {}).items()},
            loosened=[dict(x) for x in raw.get("loosened") or []],
            suite=dict(raw.get("suite") or UNKNOWN_SUITE),
            verdict=str(raw.get("verdict") or ""),
            accepted=bool(raw.get("accepted", False)),
        )


def is_latest(path: Path) -> bool:
    """Whether ``latest.json`` beside the record at ``path`` is that record (a dry run's or a collection's
    record never becomes it)."""
    latest = path.parent / "latest.json"
    return path.is_file() and latest.is_file() and filecmp.cmp(path, latest, shallow=False)


def _claim(path: Path) -> Path:
    """The first free name of ``path``, ``<stem>-2``, ``<stem>-3``, ..., created empty so no other run takes it."""
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            os.close(os.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{path.parent}: 999 run records named {path.stem}: clean the folder up")


def _time(value: Any) -> _dt.datetime | None:
    """An ISO time as written (``None`` when absent); a naive one is taken as UTC."""
    if value is None or value == "":
        return None
    moment = _dt.datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=_dt.timezone.utc)


class RecordError(ValueError):
    """A file that is not a readable gpuaccept run record; the message names the file and why."""


def read_record(path: Path) -> RunRecord:
    """A run record, checked to be one and migrated to the current schema (the baseline, the summary,
    the history and the calibration read records only through this)."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordError(f"run record {path} not found") from None
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path} is not a readable run record: {exc}") from None
    if not isinstance(record, dict) or not str(record.get("schema", "")).startswith(_SCHEMA_PREFIX):
        raise RecordError(f"{path} is not a gpuaccept run record (no 'schema: gpuaccept.run/...')")
    schema = str(record["schema"])
    version = schema.removeprefix(_SCHEMA_PREFIX)
    if not version.isdigit() or int(version) > _SCHEMA_VERSION:
        raise RecordError(
            f"{path}: run record schema {schema} is not one this gpuaccept reads (up to {SCHEMA}); "
            "read it with the gpuaccept that wrote it, or a newer one"
        )
    return RunRecord.from_dict(record, path)
