"""The acceptance summary's table by requirement: each requirement this run's checks prove, the verdict of
those checks, and the nodes where one failed or could not be measured.

Read from the run record alone: every check names the requirement IDs it proves (``MetricResult.
requirements``, as the catalogue declared them when the run judged it); the requirements catalogue only
lends each ID its title and whether the suite covers it in part. It never judges: a row is

* **failed** when a check naming it failed;
* **could not measure** when none failed but one could not be judged (no limit, a reading not taken), or a
  test whose checks name it ended in an error (its other cases' checks say which requirements it serves:
  a node that timed out before any check still counts against them);
* **passed** when its checks passed (at least one judged, none failed or missing);
* **not judged** when only informational or calibration figures name it.

A record written before checks named requirements has no row (the page says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuaccept.report.summary_model import CLUSTER_ROW
from gpuaccept.results.record import RunRecord
from gpuaccept.thresholds.requirements import Catalogue

__all__ = ["RequirementRow", "requirement_rows"]

_WORDS = {"passed": "passed", "failed": "failed", "error": "could not measure", "not run": "not judged"}


@dataclass
class RequirementRow:
    """One requirement as this run proved it."""

    id: str
    title: str
    #: the catalogue says the suite covers it only in part (what is missing: docs/requirements.md)
    partly: bool
    verdict: str = "not run"
    #: judged checks (passed or failed) naming it
    judged: int = 0
    failing: list[str] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)

    @property
    def word(self) -> str:
        return _WORDS[self.verdict]


def _function(nodeid: str) -> str:
    """``tests/x.py::test_a[node1-ddp]`` -> ``tests/x.py::test_a``: the test whatever its case."""
    return nodeid.split("[", 1)[0]


def _add(names: list[str], node: str) -> None:
    if node not in names:
        names.append(node)


def requirement_rows(record: RunRecord, catalogue: Catalogue) -> list[RequirementRow]:
    """A row per requirement a check of ``record`` names, in the catalogue's order (unknown IDs last)."""
    rows: dict[str, RequirementRow] = {}
    serves: dict[str, set[str]] = {}

    def row(rid: str) -> RequirementRow:
        if rid not in rows:
            req = catalogue.by_id.get(rid)
            rows[rid] = RequirementRow(rid, req.title if req else "", bool(req and req.partly))
        return rows[rid]

    for check in record.metrics:
        serves.setdefault(_function(check.test), set()).update(check.requirements)
        for rid in check.requirements:
            found = row(rid)
            if check.verdict in ("pass", "fail"):
                found.judged += 1
            if check.verdict == "fail":
                _add(found.failing, check.node)
            elif check.verdict in ("unjudged", "unmeasured"):
                _add(found.unmeasured, check.node)
    for entry in record.tests.values():
        if entry.verdict != "error":
            continue
        for rid in sorted(serves.get(_function(entry.nodeid), ())):
            for node in entry.nodes or [CLUSTER_ROW]:
                _add(row(rid).unmeasured, str(node))
    for found in rows.values():
        found.verdict = (
            "failed" if found.failing else "error" if found.unmeasured else "passed" if found.judged else "not run"
        )
    order = {req.id: i for i, req in enumerate(catalogue.requirements)}
    return sorted(rows.values(), key=lambda r: (order.get(r.id, len(order)), r.id))
