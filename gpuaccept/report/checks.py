"""What one test verified, for the three places that show it: Allure, JUnit XML and the summary page.

The judging core ships each test's outcome on its report (``report.gpuaccept``: verdict, category,
nodes); the checks are the ``MetricResult`` objects the report plugin heard of through
``pytest_gpuaccept_metric``. This module turns them into what a reader of each place needs, and
decides nothing: the verdict and the category are the core's.

* Allure: the status (``broken`` for could-not-measure, else ``failed``), the message with the
  category in front (``[threshold miss] ...``, which categories.json matches), and a table of the
  checks with observed value, limit, source and verdict;
* JUnit XML: a few short properties (node, GPUs, verdict, category, failed checks) that GitLab and
  Jenkins show beside the test, in place of the long lists a CI page cannot display.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuaccept.report.allure_files import category_prefix
from gpuaccept.report.render import fmt, render
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.terminal import margin

__all__ = [
    "JUNIT_PREFIX",
    "allure_message",
    "allure_status",
    "check_line",
    "checks_html",
    "checks_markdown",
    "junit_properties",
    "worst_failure",
]

#: JUnit property names start with this (``gpuaccept.node``), apart from any a site's plugin adds.
JUNIT_PREFIX = "gpuaccept."
#: At most this many checks are listed in Allure's description (the "checks" attachment has them all).
MAX_LISTED = 40
#: At most this many failed checks are named in one JUnit property (the count says how many more).
MAX_NAMED = 8


def check_line(check: MetricResult) -> str:
    """``node1 GPU 3 (0000:9A:00.0): matmul_bf16_tflops = 612 TFLOP/s, expected >= 700``."""
    unit = f" {check.unit}" if check.unit and check.kind == "metric" else ""
    return f"{check.where}: {check.metric} = {fmt(check.value)}{unit}, expected {check.limit_text()}"


def worst_failure(checks: Iterable[MetricResult]) -> MetricResult | None:
    """The failed check furthest from its limit (the first failed expectation when none is numeric)."""
    failed = [c for c in checks if c.verdict == "fail"]
    if not failed:
        return None
    scored = [(m, c) for c in failed if (m := margin(c)) is not None]
    return min(scored, key=lambda pair: pair[0])[1] if scored else failed[0]


def allure_status(verdict: str) -> str | None:
    """Allure's status for the core's verdict: could-not-measure is *broken*, a miss is *failed*."""
    return {"failed": "failed", "error": "broken"}.get(verdict)


def allure_message(category: str | None, message: str | None) -> str:
    """The status message with the core's category in front, once (a teardown may report again)."""
    text = message or ""
    if category is None:
        return text
    prefix = category_prefix(category)
    return text if text.startswith(prefix) else prefix + text


def _rows(checks: Sequence[MetricResult]) -> list[dict[str, Any]]:
    return [
        {
            "check": c.metric,
            "kind": c.kind,
            "where": c.where,
            "observed": fmt(c.value),
            "unit": c.unit,
            "expected": c.limit_text(),
            "verdict": c.verdict,
            "source": c.source or "",
            "reason": c.reason,
        }
        for c in checks
    ]


def _counts(checks: Sequence[MetricResult]) -> dict[str, int]:
    return {v: sum(1 for c in checks if c.verdict == v) for v in ("pass", "fail", "info", "unjudged")}


def checks_html(checks: Sequence[MetricResult]) -> str:
    """A table of the checks as a standalone HTML page (Allure's "checks" attachment)."""
    return render("checks.html.j2", rows=_rows(checks), counts=_counts(checks))


def checks_markdown(checks: Sequence[MetricResult], description: str | None = None) -> str:
    """The test's description and its checks as a Markdown table (Allure's description renders it)."""
    order = {"fail": 0, "unjudged": 1, "pass": 2, "info": 3}
    rows = sorted(_rows(checks), key=lambda r: order.get(r["verdict"], 4))
    return render("checks.md.j2", rows=rows, counts=_counts(checks), description=description or "", keep=MAX_LISTED)


def _names(names: Iterable[str], keep: int = 20) -> str:
    unique = sorted(set(names))
    return ", ".join(unique[:keep]) + (f", and {len(unique) - keep} more" if len(unique) > keep else "")


def _gpus(checks: Iterable[MetricResult]) -> str:
    """``node1: 0, 1, 2, 3``: the GPUs the checks name, by index (pairs and other components left out)."""
    by_node: dict[str, set[str]] = {}
    for c in checks:
        if c.on_gpu:
            by_node.setdefault(c.node, set()).add(str(c.subject).split(" ")[0])
    key = lambda index: (not index.isdigit(), int(index) if index.isdigit() else 0, index)  # noqa: E731
    return "; ".join(f"{node}: {', '.join(sorted(ids, key=key))}" for node, ids in sorted(by_node.items()))


def junit_properties(data: Mapping[str, Any], checks: Sequence[MetricResult]) -> list[tuple[str, str]]:
    """Short ``(name, value)`` pairs for ``--junitxml``: what a CI page shows beside the verdict
    (``data``: the core's ``report.gpuaccept``; ``checks``: the test's checks)."""
    nodes = list(data.get("nodes") or []) or sorted({c.node for c in checks})
    gpus = _gpus(checks)
    failed = [c for c in checks if c.verdict == "fail"]
    judged = [c for c in checks if c.judged]
    props = [
        ("verdict", str(data.get("verdict", ""))),
        ("node", ", ".join(nodes)),
        ("gpus", gpus),
        ("checks", f"{len(judged)} judged, {len(failed)} failed"),
        ("metrics", _names(c.metric for c in judged)),
    ]
    if data.get("category"):
        props.append(("category", str(data["category"])))
    bug = data.get("suite_error")
    if bug:
        props.append(("suite_error", f"{bug['type']} raised at {bug['where']}: the suite could not judge this test"))
    if failed:
        named = "; ".join(check_line(c) for c in failed[:MAX_NAMED])
        more = f"; and {len(failed) - MAX_NAMED} more" if len(failed) > MAX_NAMED else ""
        props.append(("failed_checks", named + more))
        worst = worst_failure(failed)
        if worst is not None and len(failed) > 1:
            props.append(("worst", check_line(worst)))
    return [(JUNIT_PREFIX + name, value) for name, value in props if value]
