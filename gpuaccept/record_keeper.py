"""The run record kept from the test reports: each test's verdict, category, checks, commands and
fingerprints merged into the session's ``RunRecord``.

From the reports and nothing else, so it works the same in pytest-xdist's controller, where the tests'
own process state is out of reach and only the reports arrive (the only rebuild of checks).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import record_id
from gpuaccept.state import SessionState

__all__ = ["RecordKeeper", "report_data"]


def report_data(report: pytest.TestReport) -> dict[str, Any] | None:
    """What the plugin's ``pytest_runtest_makereport`` put on a report (``report.gpuaccept``), or None."""
    data = getattr(report, "gpuaccept", None)
    return data if isinstance(data, dict) else None


class RecordKeeper:
    """Merges each test's outcome into the run record from its reports (in the xdist controller too,
    where the tests' own process state is out of reach and only the reports arrive)."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self._merged: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = report_data(report)
        if data is None:
            return
        verdict = data["verdict"]
        record = self.state.record
        entry = record.test(record_id(report.nodeid))
        if entry.verdict in ("failed", "error") and verdict in ("passed", "skipped", "not run", "measured"):
            return  # a teardown success never hides a failed call
        entry.verdict = verdict
        entry.category = data.get("category")
        entry.not_run = data.get("not_run") or entry.not_run
        entry.suite_error = data.get("suite_error") or entry.suite_error
        record.merge_hooks(data.get("test_hooks") or {})  # seen by an xdist worker's probes
        entry.duration_s = round(entry.duration_s + report.duration, 3)
        entry.nodes = data.get("nodes") or entry.nodes
        entry.commands = data.get("commands") or entry.commands
        entry.ran_in = data.get("ran_in") or entry.ran_in
        if report.longrepr is not None and verdict != "passed":
            entry.message = _short(report)
        if entry.nodeid not in self._merged:  # a failing teardown reports the same metrics again
            self._merged.add(entry.nodeid)
            checks = [MetricResult.from_dict(raw) for raw in data.get("metrics") or []]
            record.metrics.extend(checks)
            entry.checks = [c.check_entry() for c in checks]
        for node, fingerprint in (data.get("fingerprints") or {}).items():
            record.fingerprints.setdefault(node, fingerprint)


def _short(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(report.longrepr)[-2000:]
