"""How a test ends: decided once, by the plugin, from the checks the test recorded.

A test says what it measured (``judge.check``/``expect``/``info``, and ``judge.busy``/``unreadable``
for what it could not measure) and returns; this module turns the checks into the one verdict, so the
rules hold for every test whatever its body did:

* a failed check makes the test FAILED, with one message naming every miss (node, subject, metric,
  value, limit, reason), the regressions apart, and below them what else went wrong;
* otherwise a needed limit that is missing (``unjudged``) or a reading that could not be taken or was
  disturbed (``unmeasured``: a busy GPU, an unreadable counter) makes it an ERROR;
* otherwise a test with no judged check (nothing measured, or only informational figures) is an ERROR:
  a pass must be earned;
* a calibration run's figures without a limit (``measured``) end the test ``measured``;
* else it passed.

An exception that is not a ``MeasurementError`` (a bug of ours: a ``KeyError`` in a judging call) is
no check at all: ``judging.suite_error`` makes the test an ERROR of category ``suite error`` naming the
exception, where it was raised and the test, unless a judged check had already failed.

``nodecheck`` (the Slurm health check) and the plugin both end through ``outcome``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpuaccept.results.metrics import MetricResult

__all__ = ["BUSY_METRIC", "Outcome", "outcome"]

#: the check ``judge.busy`` records: a GPU other processes used while it was measured
BUSY_METRIC = "gpu_idle"


@dataclass(frozen=True)
class Outcome:
    """A test's verdict and the message that explains it ("" when it passed)."""

    verdict: Literal["passed", "failed", "error", "measured"]
    message: str = ""


def _line(check: MetricResult) -> str:
    text = f"{check.where}: {check.metric} = {check.value} {check.unit} (limit {check.limit_text()}; {check.reason})"
    details = check.extra.get("details") or []
    return text + "".join(f"\n    {d}" for d in details)


def _section(title: str, lines: Sequence[str]) -> str:
    return f"{title}:\n  " + "\n  ".join(lines) if lines else ""


def _unmeasured(checks: Sequence[MetricResult]) -> list[str]:
    """What could not be measured: busy GPUs first (their node named), then unreadable readings."""
    busy = [c for c in checks if c.verdict == "unmeasured" and c.metric == BUSY_METRIC]
    other = [c for c in checks if c.verdict == "unmeasured" and c.metric != BUSY_METRIC]
    parts = []
    for node in sorted({c.node for c in busy}):
        lines = [f"{c.what}: {c.reason}" for c in busy if c.node == node]
        parts.append(
            _section(
                f"GPU busy on {node}: other processes were running before the benchmark, so it measured the "
                "sharing, not the GPU",
                lines,
            )
        )
    for node in sorted({c.node for c in other}):
        parts.append(
            _section(
                f"{node}: readings could not be taken",
                [f"{c.where}: {c.metric} ({c.reason})" for c in other if c.node == node],
            )
        )
    return parts


def outcome(checks: Sequence[MetricResult], test: str = "") -> Outcome:
    """The verdict ``checks`` call for (see the module docstring)."""
    failed = [c for c in checks if c.verdict == "fail"]
    unjudged = sorted({c.reason for c in checks if c.verdict == "unjudged"})
    unmeasured = _unmeasured(checks)
    if failed:
        misses = [c for c in failed if not c.extra.get("regressed_only")]
        regressed = [c for c in failed if c.extra.get("regressed_only")]
        parts = [
            _section(f"{len(misses)} failed check(s)", [_line(c) for c in misses]),
            _section(f"{len(regressed)} regression(s) vs baseline", [_line(c) for c in regressed]),
            _section("also could not judge", unjudged),
            *(f"also {part}" for part in unmeasured),
        ]
        return Outcome("failed", "\n".join(p for p in parts if p))
    if unjudged:
        return Outcome("error", "; ".join(unjudged) + "".join(f"\n{p}" for p in unmeasured))
    if unmeasured:
        return Outcome("error", "\n".join(unmeasured))
    if not any(c.judged or c.verdict == "measured" for c in checks):
        shown = ", ".join(sorted({c.metric for c in checks}))
        what = f" (only informational figures: {shown})" if shown else " (nothing was measured)"
        return Outcome("error", f"{test + ': ' if test else ''}nothing was judged, so nothing can pass{what}")
    if any(c.verdict == "measured" for c in checks):
        names = ", ".join(sorted({c.metric for c in checks if c.verdict == "measured"}))
        return Outcome("measured", f"calibration: measured {names} (no limit yet)")
    return Outcome("passed")
