"""What the acceptance summary says, worked out from a run record alone (no pytest, no files, no plots).

The run record (``reports/runs/<UTC>.json``) is the source of truth: the verdict of every test, the
category the judging core gave each failure, and every check with its value, limit and source. This
module reads it into what a customer asks, in the order they ask it:

1. is the cluster accepted (and if not, how many tests failed or could not be measured)?
2. which cluster, nodes, SKU, driver, CUDA, NCCL and thresholds was that?
3. which node failed what, and by how much: a nodes x areas matrix, each failure with its worst
   figure against its limit;
4. the failures and errors in full, with every failed check.

It never judges: a cell is the worst verdict of the tests in it, as the core recorded them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaccept.judging.categories import SUITE_ERROR
from gpuaccept.judging.verdict import cluster_verdict, loosened_lines, verdict_text
from gpuaccept.markers import AREAS, area_named
from gpuaccept.report.allure_files import CATEGORY_TITLES
from gpuaccept.report.checks import check_line, worst_failure
from gpuaccept.report.identity import environment
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord, TestEntry
from gpuaccept.results.terminal import VERDICT_RANK, margin, worst_verdict

__all__ = [
    "CLUSTER_ROW",
    "Cell",
    "NodeVerdict",
    "Overview",
    "Problem",
    "Row",
    "area_of",
    "cluster_verdict",
    "overview",
]

#: The matrix row of tests that ran on several nodes at once (NCCL scales, multi-node training).
CLUSTER_ROW = "all nodes together"
WORDS = {
    "passed": "passed",
    "failed": "failed",
    "error": "could not measure",
    "skipped": "skipped",
    "not run": "not run",
    "measured": "measured (calibration)",
}
_AREA_ORDER = list(dict.fromkeys(area.title for area in AREAS))


def area_of(nodeid: str) -> str:
    """``tests/acceptance/test_gpu_health.py::...`` -> "GPU health": the area of the module's name."""
    module = Path(nodeid.split("::")[0]).stem.removeprefix("test_")
    area = area_named(module)
    return area.title if area is not None else module.replace("_", " ").capitalize() or "Other"


def _area_key(area: str) -> tuple[int, str]:
    return (_AREA_ORDER.index(area), area) if area in _AREA_ORDER else (len(_AREA_ORDER), area)


def _short(text: str, limit: int = 160) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _name(nodeid: str) -> str:
    return nodeid.split("::")[-1]


class _Worded:
    """A cell, row, node or problem whose verdict the summary shows in its words (an error: "could not measure")."""

    verdict: str

    @property
    def word(self) -> str:
        return WORDS.get(self.verdict, self.verdict)


@dataclass
class Cell(_Worded):
    """One node's tests of one area: the worst verdict, and what to say about it."""

    verdict: str
    detail: str
    tests: list[str] = field(default_factory=list)


@dataclass
class Row(_Worded):
    node: str
    verdict: str
    cells: list[Cell | None]


@dataclass
class NodeVerdict(_Worded):
    """A node, its verdict and the one figure that says most about it (worst miss, or closest to one)."""

    node: str
    verdict: str
    note: str


@dataclass
class Problem(_Worded):
    """A test that did not pass: what it is, where, why (the core's category) and its failed checks."""

    test: str
    nodeid: str
    area: str
    nodes: list[str]
    verdict: str
    category: str
    message: str
    failed: list[dict[str, Any]]


@dataclass
class Overview:
    accepted: bool
    verdict: str
    reason: str
    counts: dict[str, int]
    identity: list[tuple[str, str]]
    thresholds: list[tuple[str, str]]
    nodes: list[NodeVerdict]
    areas: list[str]
    rows: list[Row]
    problems: list[Problem]
    by_category: list[tuple[str, int]]
    skipped: list[tuple[str, int]]
    started: str
    status: str
    #: the test hooks set during the run, ``NAME=value (where)``: the run is not an acceptance
    hooks: list[str] = field(default_factory=list)
    #: the limits a site file loosened against the packaged ones
    loosened: list[str] = field(default_factory=list)
    #: the suite that judged: ``gpuaccept 0.1.0, commit 1a2b3c4 (edited)``
    suite: str = ""
    #: tests an exception of the suite's own ended (counted among the errors, shown apart)
    suite_errors: int = 0


def _cell(entries: list[TestEntry], by_test: Mapping[str, list[MetricResult]], node: str | None) -> Cell:
    verdict = worst_verdict(e.verdict for e in entries)
    tests = [f"{_name(e.nodeid)}: {WORDS.get(e.verdict, e.verdict)}" for e in entries]
    worst_of = [e for e in entries if e.verdict == verdict]
    if verdict == "failed":
        failed = [c for e in worst_of for c in by_test.get(e.nodeid, []) if node is None or c.node == node]
        worst = worst_failure(failed) or worst_failure(c for e in worst_of for c in by_test.get(e.nodeid, []))
        detail = _figure(worst) if worst is not None else _short(worst_of[0].message)
    elif verdict == "error":
        detail = _short(worst_of[0].message, 120)
    elif verdict == "skipped":
        detail = _short(worst_of[0].message.removeprefix("Skipped: "), 80)
    else:
        detail = f"{len(entries)} tests" if len(entries) > 1 else ""
    if verdict in ("failed", "error") and len(worst_of) > 1:
        detail = f"{len(worst_of)} tests {WORDS[verdict]}; worst: {detail}"
    return Cell(verdict, detail, tests)


def _figure(check: MetricResult) -> str:
    """``matmul_bf16_tflops GPU 3 = 612 TFLOP/s, limit >= 700``: a failure's figure against its limit."""
    gpu = f" {check.what}" if check.what else ""
    unit = f" {check.unit}" if check.unit and check.kind == "metric" else ""
    value = f"{check.value:.4g}" if isinstance(check.value, float) else str(check.value)
    return f"{check.metric}{gpu} = {value}{unit}, limit {check.limit_text()}"


def _node_note(node: str, verdict: str, metrics: list[MetricResult], problems: list[Problem]) -> str:
    mine = [m for m in metrics if m.node == node]
    if verdict == "failed":
        worst = worst_failure(mine)
        return f"worst: {_figure(worst)}" if worst is not None else "a test failed"
    if verdict == "error":
        hit = [p for p in problems if node in p.nodes and p.verdict == "error"]
        word = "suite error" if hit and hit[0].category == CATEGORY_TITLES[SUITE_ERROR] else "could not measure"
        return f"{word}: {hit[0].test}" if hit else "a test could not measure"
    scored = [(m, c) for c in mine if c.verdict == "pass" and (m := margin(c)) is not None]
    if not scored:
        return "no figure with a limit" if verdict == "passed" else ""
    closest = min(scored, key=lambda pair: pair[0])[1]
    return f"closest to its limit: {_figure(closest)}"


def _problem(entry: TestEntry, checks: list[MetricResult]) -> Problem:
    verdict = entry.verdict
    category = entry.category or ("could not measure" if verdict == "error" else "threshold miss")
    failed = [c.check_entry() | {"line": check_line(c)} for c in checks if c.verdict in ("fail", "unjudged")]
    return Problem(
        test=_name(entry.nodeid),
        nodeid=entry.nodeid,
        area=area_of(entry.nodeid),
        nodes=[str(n) for n in entry.nodes] or sorted({c.node for c in checks if c.verdict == "fail"}),
        verdict=verdict,
        category=CATEGORY_TITLES.get(category, category),
        message=entry.message,
        failed=failed,
    )


def _skip_reasons(tests: Iterable[TestEntry], nodes: list[str]) -> list[tuple[str, int]]:
    """Why tests were skipped, with how many: one line per reason, node names folded ("a node")."""
    names = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in sorted(nodes, key=len, reverse=True)) or r"(?!)")
    reasons: dict[str, int] = {}
    for entry in tests:
        if entry.verdict == "skipped":
            reason = _short(entry.message or "no reason given", 100).removeprefix("Skipped: ")
            reason = names.sub("a node", reason)
            reasons[reason] = reasons.get(reason, 0) + 1
    return sorted(reasons.items(), key=lambda kv: -kv[1])


def overview(record: RunRecord, *, cluster_name: str | None = None) -> Overview:
    """Everything on the summary page that is not a chart or a comparison, from the record alone."""
    tests = list(record.tests.values())
    by_test: dict[str, list[MetricResult]] = {}
    for m in record.metrics:
        by_test.setdefault(m.test, []).append(m)
    nodes = [str(n) for n in record.cluster.get("nodes") or []]
    for entry in tests:
        nodes += [str(n) for n in entry.nodes if str(n) not in nodes]

    areas = sorted({area_of(t.nodeid) for t in tests}, key=_area_key)
    grouped: dict[tuple[str, str], list[TestEntry]] = {}
    for entry in tests:
        for node in [str(n) for n in entry.nodes] or [CLUSTER_ROW]:
            grouped.setdefault((node, area_of(entry.nodeid)), []).append(entry)
    bad = [t for t in tests if t.verdict in ("failed", "error")]
    problems = [_problem(t, by_test.get(t.nodeid, [])) for t in bad]
    problems.sort(key=lambda p: (-VERDICT_RANK.get(p.verdict, 0), p.area, p.nodeid))

    rows: list[Row] = []
    verdicts: list[NodeVerdict] = []
    for node in [*nodes, CLUSTER_ROW]:
        cells = [
            _cell(grouped[(node, area)], by_test, None if node == CLUSTER_ROW else node)
            if (node, area) in grouped
            else None
            for area in areas
        ]
        present = [c for c in cells if c is not None]
        if node == CLUSTER_ROW and not present:
            continue
        verdict = worst_verdict(c.verdict for c in present) if present else "not run"
        rows.append(Row(node, verdict, cells))
        if node != CLUSTER_ROW:
            verdicts.append(NodeVerdict(node, verdict, _node_note(node, verdict, record.metrics, problems)))

    accepted, reason = cluster_verdict(record)
    env = environment(record, None, cluster_name=cluster_name)
    keys = (
        "Cluster",
        "Partition",
        "Slurm job",
        "Launcher",
        "Nodes",
        "GPU model",
        "SKU",
        "Driver",
        "CUDA",
        "NCCL",
        "torch",
        "Kernel",
        "OS",
        "Thresholds digest",
    )
    identity = [(key, env[key]) for key in keys if key in env]
    sha = record.thresholds.get("sha256") or {}
    files = record.thresholds.get("files") or list(sha)
    thresholds = [(str(f), str(sha.get(str(f), "not recorded"))) for f in files]
    categories: dict[str, int] = {}
    for problem in problems:
        categories[problem.category] = categories.get(problem.category, 0) + 1
    return Overview(
        accepted=accepted,
        verdict=verdict_text(record, accepted),
        reason=reason,
        counts=record.counts,
        identity=identity,
        thresholds=thresholds,
        nodes=verdicts,
        areas=areas,
        rows=rows,
        problems=problems,
        by_category=sorted(categories.items(), key=lambda kv: -kv[1]),
        skipped=_skip_reasons(tests, nodes),
        started=record.started.isoformat(),
        status=record.status,
        hooks=[
            f"{name}={hook.get('value', '')} ({', '.join(hook.get('where') or [])})"
            for name, hook in sorted(record.test_hooks.items())
        ],
        loosened=loosened_lines(record),
        suite=suite_text(record.suite),
        suite_errors=sum(1 for t in tests if t.verdict == "error" and t.category == SUITE_ERROR),
    )


def suite_text(suite: Mapping[str, Any]) -> str:
    """``gpuaccept 0.1.0, commit 1a2b3c4d5e6f (tracked files edited)``: the suite that judged."""
    edited = suite.get("edited")
    state = " (tracked files edited)" if edited is True else " (unedited)" if edited is False else " (edited: unknown)"
    return f"gpuaccept {suite.get('version') or 'unknown'}, commit {suite.get('commit') or 'unknown'}{state}"
