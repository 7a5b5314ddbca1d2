"""Each test's outcome, as the core decided it, put where Allure and JUnit XML read it.

``checks.py`` says what a reader of each place needs (the status, the message, the checks' table, the
short properties); this module writes it onto the running test: allure-pytest's result object (its status,
message and description follow the core's verdict and category) and the item's ``user_properties``
(``--junitxml``), and the session verdict, the test hooks and the loosened limits as JUnit's global
properties. It decides nothing: the report plugin (``plugin.py``) calls it from
``pytest_runtest_makereport`` and once the run record is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from gpuaccept.results.metrics import MetricResult
    from gpuaccept.results.record import RunRecord

__all__ = ["allure_outcome", "junit_properties", "junit_verdict"]

#: The first non-pass outcome shown in Allure (a failing teardown after a failed call keeps the call's).
_SHOWN = pytest.StashKey[str]()


def junit_properties(
    item: pytest.Item, report: pytest.TestReport, data: dict[str, Any], checks: list[MetricResult]
) -> None:
    """Replace our properties on the item (the teardown report, which junitxml reads, copies them)."""
    from gpuaccept.report.checks import JUNIT_PREFIX, junit_properties

    props: list[tuple[str, object]] = list(junit_properties(data, checks))
    for holder in (item.user_properties, report.user_properties):
        holder[:] = [p for p in holder if not str(p[0]).startswith(JUNIT_PREFIX)] + props


def junit_verdict(config: pytest.Config, record: RunRecord) -> None:
    """The session verdict, the test hooks and the loosened limits as ``--junitxml`` global properties
    (the record is written before junitxml writes its file)."""
    from _pytest.junitxml import xml_key

    from gpuaccept.judging.verdict import loosened_lines

    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    xml.add_global_property("gpuaccept.session_verdict", record.verdict)
    if record.test_hooks:
        xml.add_global_property("gpuaccept.test_hooks", ", ".join(sorted(record.test_hooks)))
    for line in loosened_lines(record):
        xml.add_global_property("gpuaccept.loosened", line)


def _allure_test(item: pytest.Item) -> Any:
    """allure-pytest's result object of the running test, or None (no listener, another version)."""
    listener: Any = item.config.pluginmanager.get_plugin("allure_listener")
    if listener is None:
        return None
    try:
        uuid = listener._cache.get(item.nodeid)
        return listener.allure_logger.get_test(uuid) if uuid else None
    except AttributeError:
        return None


def allure_outcome(
    item: pytest.Item, report: pytest.TestReport, data: dict[str, Any], checks: list[MetricResult]
) -> None:
    """Allure's status and message follow the core's verdict and category; the call's description lists
    the test's ``checks``."""
    from allure_commons.model2 import StatusDetails

    from gpuaccept.report.checks import allure_message, allure_status, checks_markdown

    result = _allure_test(item)
    if result is None:
        return
    if report.when == "call" and not result.descriptionHtml:  # a test's own HTML description is kept
        description = getattr(getattr(item, "function", None), "__doc__", None)
        result.description = checks_markdown(checks, _dedent(description))
    status = allure_status(str(data.get("verdict")))
    if status is None or _SHOWN in item.stash:
        return
    item.stash[_SHOWN] = status
    details = result.statusDetails or StatusDetails(message=None, trace=None)
    message = details.message or _longrepr_message(report)
    details.message = allure_message(data.get("category"), message.removeprefix("AssertionError: "))
    details.trace = details.trace or report.longreprtext
    result.status, result.statusDetails = status, details


def _dedent(text: str | None) -> str | None:
    import inspect

    return inspect.cleandoc(text) if text else None


def _longrepr_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else report.longreprtext
