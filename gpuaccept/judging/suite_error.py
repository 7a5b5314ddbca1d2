"""A test ended by an exception of ours: the suite could not judge it.

A ``KeyError`` in a judging call, an ``AssertionError`` in a test body, any exception that is not a
``MeasurementError`` (the probe, the node or the launch failed) is a bug of gpuaccept, never the
hardware's fault: the test is an ERROR of category ``suite error`` (``judging.categories``) naming
the exception, the ``file:line`` that raised it and the test, and never FAILED, so it never drains
a node. A judged check that had already failed before the exception still makes the test FAILED:
that miss is the hardware's, and the message says the suite error below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuaccept.errors import MeasurementError
from gpuaccept.judging.outcome import outcome
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import record_id

__all__ = ["suite_error"]

#: where gpuaccept's own files are named from (``gpuaccept/judging/judge.py:120``)
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _where(excinfo: pytest.ExceptionInfo[BaseException], rootpath: Path) -> str:
    """``file:line`` of the frame that raised, relative to the test's folder or gpuaccept's checkout."""
    if not excinfo.traceback:
        return "unknown"
    last = excinfo.traceback[-1]
    path = Path(str(last.path))
    for root in (rootpath, _SOURCE_ROOT):
        if path.is_relative_to(root):
            path = path.relative_to(root)
            break
    return f"{path}:{last.lineno + 1}"


def _say(report: pytest.TestReport, message: str) -> None:
    """``message`` as the report's one-line reason (the terminal's short summary, the record), the
    traceback kept below it for whoever fixes the bug."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        crash.message = message
    else:
        report.longrepr = f"{message}\n{report.longreprtext}"


def suite_error(
    report: pytest.TestReport, call: pytest.CallInfo[None], item: pytest.Item, checks: Sequence[MetricResult]
) -> dict[str, str] | None:
    """The suite error that ended this report's phase (``{"type", "where", "test", "message"}``, its
    message also put on the report), or None when no exception of ours did."""
    excinfo = call.excinfo
    if excinfo is None or excinfo.errisinstance((MeasurementError, pytest.skip.Exception)):
        return None
    test = record_id(item.nodeid)
    where = _where(excinfo, item.config.rootpath)
    message = (
        f"suite error: {excinfo.typename}: {excinfo.value} raised at {where} in {test}; the suite could not "
        "judge this test (a fault of gpuaccept, not of the hardware)"
    )
    failed = [c for c in checks if c.verdict == "fail"]
    _say(report, f"{outcome(checks, test).message}\nalso {message}" if failed else message)
    return {"type": excinfo.typename, "where": where, "test": test, "message": message}
