"""The pytest plugin (entry point ``pytest11: gpuaccept``): the flow of an acceptance session.

configure: resolve settings, validate thresholds (a usage error before any job exists), install the
SIGTERM handler. collection: node-parametrized tests get one case per allocated node and an
``xdist_group`` per node. run: measurement failures become *errors*, threshold misses *failures*.
finish: the run record is written whatever the ending, and the allocation released.
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Generator
from typing import Any

import pytest

from gpuaccept import hookspecs
from gpuaccept.errors import MeasurementError, ToolMissing
from gpuaccept.fleet.drain import run_drain
from gpuaccept.judging.baseline import BASELINE_KEY, load_session_baseline
from gpuaccept.judging.categories import category
from gpuaccept.judging.judge import Judge
from gpuaccept.judging.outcome import outcome
from gpuaccept.judging.suite_error import suite_error
from gpuaccept.judging.verdict import exit_code, session_lines
from gpuaccept.markers import MARKERS
from gpuaccept.nodecheck.expected import write_expected
from gpuaccept.record_keeper import RecordKeeper, report_data
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import record_id
from gpuaccept.results.terminal import node_summary_lines, not_run_notes
from gpuaccept.settings import add_options, asked
from gpuaccept.startup import LateStart, checked_inputs
from gpuaccept.state import STATE_KEY, SessionState

_OUR_FIXTURES = frozenset({"gpuaccept_state", "node"})


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Inert until asked (``settings.asked``): then the session starts now, every input checked; else at
    the first acceptance test collected (``startup.LateStart``); another project's tests never see it."""
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    config.pluginmanager.register(LateStart(_start), LateStart.name)
    if asked(config):
        _start(config)


def _start(config: pytest.Config) -> SessionState:
    """Check every input (exit 4 naming it, before any job), then set the session up."""
    settings, thresholds, signer = checked_inputs(config)
    state = SessionState(config, settings, thresholds, signer)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("gpuaccept_job"):
        job_id, nodes = workerinput["gpuaccept_job"]
        state.job = (job_id, list(nodes))
    config.stash[STATE_KEY] = state
    # the baseline changes verdicts, so the core reads it, now: before this run overwrites latest.json
    config.stash[BASELINE_KEY] = baseline = load_session_baseline(settings, state.reports_dir, thresholds)
    config.pluginmanager.register(RecordKeeper(state), "gpuaccept-record")
    if not config.pluginmanager.has_plugin("gpuaccept-report"):
        config.pluginmanager.register(importlib.import_module("gpuaccept.report.plugin"), "gpuaccept-report")
    config.hook.pytest_gpuaccept_configured.call_historic(kwargs={"thresholds": thresholds, "baseline": baseline})
    if workerinput is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
    if workerinput is None and config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None):
        config.pluginmanager.register(_XdistController(state), "gpuaccept-xdist")
    return state


def _sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (scancel of the outer job, a CI timeout) ends the session like Ctrl-C: record written."""
    raise KeyboardInterrupt("SIGTERM")


class _XdistController:
    """Allocate once in the controller and hand the job to every worker (workers never salloc)."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        cluster = self.state.cluster
        allocation = getattr(cluster.launcher, "allocation", None)
        if allocation is not None:
            node.workerinput["gpuaccept_job"] = [allocation.job_id, list(allocation.nodes)]
        node.workerinput["gpuaccept_alluredir"] = getattr(self.state.config.option, "allure_report_dir", None)


def _state(config: pytest.Config) -> SessionState:
    return config.stash[STATE_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per node for each acceptance test taking ``node`` (``test_x[node1]``); others keep theirs."""
    if "node" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash.get(STATE_KEY, None)
    if state is None and metafunc.definition.get_closest_marker("acceptance"):
        state = LateStart.of(metafunc.config).start(metafunc.config, metafunc.definition.nodeid)
    if state is not None:
        nodes = state.cluster.nodes
        metafunc.parametrize("node", nodes, ids=nodes)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Node-local tests share an xdist group per node; multi-node tests one group for all nodes; the tenant
    section runs last (``_tenant_last``).

    ``tryfirst``: pytest-xdist's worker reads the group marks in its own collection hook; after it, the
    marks came too late, one node's tests spread over every worker, and each worker fingerprinted the
    node again (what slowed the fleet runs: 6.5 -> 3.0 s of test time per node at 4 loopback nodes).
    """
    if STATE_KEY not in config.stash:  # not asked for, and no acceptance test collected (``LateStart``)
        return
    items[:] = sorted(items, key=_tenant_last)
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "node" in callspec.params:
            item.add_marker(pytest.mark.xdist_group(f"node-{callspec.params['node']}"))
        elif item.get_closest_marker("multinode"):
            item.add_marker(pytest.mark.xdist_group("all-nodes"))


def _tenant_last(item: pytest.Item) -> tuple[bool, bool]:
    """The sort key that runs the tenant section after every other test (a stable sort: the others keep their
    places), and its neighbours test after the rest of it: the residue test's first step then reads what the GPUs'
    last fine-tune left them, not what the neighbours probe did."""
    tenant = item.get_closest_marker("tenant") is not None
    return tenant, tenant and item.path.name == "test_neighbours.py"


class UnknownGpu(pytest.UsageError):  # type: ignore[misc]  # final in typing; pytest maps it to exit 4
    """A node's GPU model matches no SKU: exit code 4 before any test, naming the model and the way forward."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Before any test runs: every allocated node's fingerprint, in one fan-out step, and every GPU model a
    SKU the thresholds list.

    The fingerprints taken here are the ones the tests and the judges use: no check launches a probe
    (``Fingerprints.sku_of`` is a lookup), and a node dead at this step has each of its tests ERROR with
    why (``state._NodeLoss``), while the others run. Each process that runs tests takes them (an xdist
    worker too: its judges look them up). Judging an unlisted GPU against another product's limits (a
    GB200 as a B200) or against none (every performance test an ERROR) is worse than not starting:
    ``--sku`` forces a SKU and skips that check; a dry run measures nothing.
    """
    state = session.config.stash.get(STATE_KEY, None)
    if state is None or state.settings.dry_run or session.config.option.collectonly or not session.items:
        return
    if not state.started:  # no node-parametrized test allocated at collection: the first test would, so here
        try:
            _ = state.cluster
        except Exception:  # the allocation's error is kept (state.setup_error): every test names it as before
            return
    nodes = list(state.cluster.nodes)
    state.fingerprints.prefetch(nodes)
    if hasattr(session.config, "workerinput"):
        return
    problems = state.fingerprints.unknown_models(nodes)
    if problems:
        state.record.errors.extend(problems)
        raise UnknownGpu("\n".join(problems))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    state = item.config.stash.get(STATE_KEY, None)
    if state is None:
        return (yield)
    state.current_item = item
    item.stash[_METRICS] = []
    try:
        return (yield)
    finally:
        state.current_item = None


_METRICS = pytest.StashKey[list[MetricResult]]()
#: set when the test asked for the ``judge`` fixture: its pass must then rest on judged checks
_JUDGED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Decide the verdict (passed / failed / error / skipped) from the checks, and ship them on the report.

    A test that returns normally passes only on its judged checks: with a failed check it fails, with
    a needed limit missing it errors, and with no judged check at all (nothing measured, only
    informational figures) it errors. That holds for every acceptance test and every test that asks
    for ``judge``, whatever the test body did.
    """
    report = yield
    ours = item.get_closest_marker("acceptance") or set(getattr(item, "fixturenames", ())) & _OUR_FIXTURES
    if STATE_KEY not in item.config.stash or not (ours and (report.when == "call" or report.failed or report.skipped)):
        return report
    checks = item.stash.get(_METRICS, [])
    if (
        report.passed
        and report.when == "call"
        and (item.get_closest_marker("acceptance") or item.stash.get(_JUDGED, False))
    ):
        _end(report, item, checks)
    raised = call.excinfo.value if call.excinfo is not None else None
    missing_tool = raised if isinstance(raised, ToolMissing) else None
    if getattr(report, "_gpuaccept_measured", False):
        verdict = "measured"
    elif report.passed:
        verdict = "passed"
    elif report.skipped:
        verdict = "not run" if missing_tool is not None else "skipped"
    elif getattr(report, "_gpuaccept_error", False) or (
        call.excinfo is not None and call.excinfo.errisinstance(MeasurementError)
    ):
        verdict = "error"
    else:
        verdict = "failed" if report.when == "call" else "error"
    bug = suite_error(report, call, item, checks) if report.failed else None
    if bug is not None:  # an exception of ours is never the hardware's failure; a failed check still is
        verdict = "failed" if any(c.verdict == "fail" for c in checks) else "error"
    state = _state(item.config)
    callspec = getattr(item, "callspec", None)
    nodes = [callspec.params[k] for k in ("node", "suspect") if callspec is not None and callspec.params.get(k)]
    if not nodes and state.started:  # a multi-node test: the nodes its checks were about
        nodes = sorted({c.node for c in checks} & set(state.cluster.nodes))
    entry = state.record.tests.get(record_id(item.nodeid))
    fault_of = _fault_of(state)
    report.gpuaccept = {  # type: ignore[attr-defined]  # travels from xdist workers with the report
        "verdict": verdict,
        "category": category(verdict, checks, fault_of, _regressed_only, suite_error=bug is not None),
        "suite_error": bug,
        "test_hooks": state.record.test_hooks,
        "nodes": nodes,
        "commands": list(entry.commands) if entry else [],
        "ran_in": dict(entry.ran_in) if entry else {},
        "metrics": [m.to_dict() for m in checks],
        "not_run": (
            {"check": missing_tool.check, "tool": missing_tool.tool, "detail": missing_tool.detail}
            if missing_tool is not None
            else None
        ),
        # the test's own nodes only: every node's on every report is O(nodes^2) over a run
        "fingerprints": state._fingerprints.collected(nodes) if state._fingerprints is not None else {},
    }
    return report


def _regressed_only(check: MetricResult) -> bool:
    return bool(check.extra.get("regressed_only"))


def _fault_of(state: SessionState) -> Any:
    def fault(metric: str) -> str:
        spec = state.thresholds.metrics.get(metric)
        return spec.fault if spec is not None else "threshold"

    return fault


def _end(report: pytest.TestReport, item: pytest.Item, checks: list[MetricResult]) -> None:
    """End a test whose body returned as its checks call for (``judging.outcome``): the one place a
    test's verdict is decided from what it recorded."""
    ended = outcome(checks, record_id(item.nodeid))
    if ended.verdict == "passed":
        return
    if ended.verdict == "measured":  # calibration: neither an error nor a pass; pytest counts a skip
        path, line, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (str(path), (line or 0) + 1, f"Skipped: {ended.message}")
        report._gpuaccept_measured = True  # type: ignore[attr-defined]
        return
    report.outcome = "failed"
    report.longrepr = ended.message
    report._gpuaccept_error = ended.verdict == "error"  # type: ignore[attr-defined]


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    """Show could-not-measure as ERROR (``E``), apart from threshold failures (``F``)."""
    data = report_data(report)
    if report.when == "call" and report.failed and data is not None and data["verdict"] == "error":
        return "error", "E", ("ERROR", {"red": True})
    return None


@pytest.hookimpl(tryfirst=True)  # before junitxml writes its file: the report adds the session verdict
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None or hasattr(session.config, "workerinput"):
        if state is not None:
            state.close() if state.job is None else None
        return
    status = {0: "passed", 1: "failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests"}.get(
        int(exitstatus), str(exitstatus)
    )
    unwritten = False
    try:
        if state.started or state.record.errors:
            try:
                state.config._gpuaccept_record_path = path = state.write_record(status)  # type: ignore[attr-defined]
                # what the node check (gpuaccept-node-check) compares each node's driver, CUDA and NCCL with
                write_expected(state.record.fingerprints, state.reports_dir / "expected-fingerprint.json", path, status)
            except OSError as exc:  # a full or read-only disk at the end: said, and never an exit 0
                state.notify(f"gpuaccept: could not write the run record: {exc}")
                unwritten = True
        session.exitstatus = exit_code(int(exitstatus), state.record, session.testsfailed)
        if unwritten:
            session.exitstatus = session.exitstatus or pytest.ExitCode.INTERNAL_ERROR
        if state.settings.drain_on_fail != "off" and state.started and state.cluster.kind == "slurm":
            state.drain_lines = run_drain(state.record, state.settings.drain_on_fail)
    finally:
        state.close()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None or not state.started or not state.record.tests:
        return
    terminalreporter.section("gpuaccept verdict per node")
    for line in node_summary_lines(state.record):
        terminalreporter.write_line(line)
    for note in not_run_notes(state.record.tests.values()):
        terminalreporter.write_line(f"not run: {note}", yellow=True)
    for line in state.drain_lines:
        terminalreporter.write_line(line)
    for line, colour in session_lines(state.record):
        terminalreporter.write_line(line, **{colour: True})
    path = getattr(config, "_gpuaccept_record_path", None)
    if path is not None:
        terminalreporter.write_line(f"run record: {path}")
        if state.signer is not None:  # beside the summary too: gpuaccept-verify --record R --summary S
            terminalreporter.write_line(f"signed by {state.signer.public.fingerprint}: {path}.sig")


# ---- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gpuaccept_state(request: pytest.FixtureRequest) -> SessionState:
    """The session's state; a test that asks for it in a session not started yet starts it."""
    state = request.config.stash.get(STATE_KEY, None)
    return state if state is not None else _start(request.config)


@pytest.fixture()
def gpuaccept_judge(request: pytest.FixtureRequest, gpuaccept_state: SessionState) -> Judge:
    """The judging core for this test: ``judge.check/expect/info/stragglers/busy/unreadable``; the test
    then returns and ``_end`` decides its outcome from the checks."""
    item = request.node
    collected = item.stash.setdefault(_METRICS, [])
    item.stash[_JUDGED] = True

    def sink(result: MetricResult) -> None:
        collected.append(result)
        item.config.hook.pytest_gpuaccept_metric(item=item, result=result)

    baseline = item.config.stash.get(BASELINE_KEY, None)
    test = record_id(item.nodeid)
    settings = gpuaccept_state.settings
    return Judge(
        gpuaccept_state.thresholds,
        gpuaccept_state.fingerprints.sku_of,
        sink,
        test,
        baseline,
        calibrating=settings.calibrate,
        recalibrate=settings.calibrate_metric,
    )
