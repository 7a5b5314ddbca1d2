"""Typed hooks other plugins (the report, a site's own checks) implement to follow a run.

Modelled on pytest-xdist's ``newhooks.py``: plain functions with full annotations, registered through
``pytest_addhooks``. All are notifications (no return value expected). A listener needs nothing else
of the session: the report plugin is one and reads no session state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

    from gpuaccept.dispatch.result import ProbeResult
    from gpuaccept.dispatch.step import Step
    from gpuaccept.judging.baseline import Baseline
    from gpuaccept.results.metrics import MetricResult
    from gpuaccept.results.record import RunRecord
    from gpuaccept.signing.keys import SigningKey
    from gpuaccept.thresholds.loader import Thresholds


@pytest.hookspec(historic=True)
def pytest_gpuaccept_configured(thresholds: Thresholds, baseline: Baseline | None) -> None:
    """The session is configured: the thresholds in force (the metric catalogue with its display hints
    included) and the ``--baseline`` run the judge compares with (None without one). Historic: a
    plugin registered later gets it too."""


@pytest.hookspec()
def pytest_gpuaccept_step_finished(
    item: pytest.Item | None, step: Step, command: list[str], result: ProbeResult | None
) -> None:
    """A probe step ended (``result`` is None when it broke or in a dry run)."""


@pytest.hookspec()
def pytest_gpuaccept_metric(item: pytest.Item | None, result: MetricResult) -> None:
    """A metric was measured and judged (or reported without a limit)."""


@pytest.hookspec()
def pytest_gpuaccept_record_written(path: Path, record: RunRecord, signer: SigningKey | None) -> None:
    """The run record was written at session end (also after an interruption), and signed with ``signer``
    (``--sign-key``; None without one), which then signs what is rendered from the record."""
