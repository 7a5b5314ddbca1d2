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
from gpuaccept.cluster import Cluster
from gpuaccept.errors import MeasurementError
from gpuaccept.fingerprints import Fingerprints
from gpuaccept.fleet.drain import run_drain
from gpuaccept.results.baseline import BASELINE_KEY
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.summary import node_summary_lines
from gpuaccept.settings import Settings, SettingsError, add_options, resolve
from gpuaccept.state import STATE_KEY, SessionState
from gpuaccept.thresholds.check import Checker
from gpuaccept.thresholds.loader import Thresholds, load_thresholds

MARKERS = (
    "acceptance: the acceptance suite users run against a cluster",
    "environment: node fingerprints and cross-node consistency",
    "slurm: scheduler state, step launch and GPU isolation",
    "storage: shared filesystem",
    "hygiene: OS limits and node configuration",
    "gpu_health: NVML/sysfs health of each GPU",
    "interconnect: NVLink and InfiniBand",
    "compute: GPU compute throughput",
    "memory: GPU memory and host bandwidth",
    "nccl: collective communication",
    "training: end-to-end fine-tuning",
    "multinode: needs several nodes at once (holds them exclusively)",
    "xdist_group(name): node group for pytest-xdist --dist loadgroup",
)
VERDICT = "gpuaccept_verdict"
_OUR_FIXTURES = frozenset({"cluster", "limits", "fingerprints", "node"})


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    settings = resolve(config)
    thresholds = load_thresholds(settings.thresholds)
    if settings.sku and settings.sku not in thresholds.skus:
        raise SettingsError(
            f"{settings.sources['sku']}: SKU {settings.sku!r} is not in {', '.join(map(str, thresholds.files))} "
            f"(known: {', '.join(thresholds.skus)})"
        )
    state = SessionState(config, settings, thresholds)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("gpuaccept_job"):
        job_id, nodes = workerinput["gpuaccept_job"]
        state.job = (job_id, list(nodes))
    config.stash[STATE_KEY] = state
    config.pluginmanager.register(_RecordKeeper(state), "gpuaccept-record")
    if not config.pluginmanager.has_plugin("gpuaccept-report"):
        config.pluginmanager.register(importlib.import_module("gpuaccept.report.plugin"), "gpuaccept-report")
    if workerinput is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
    if workerinput is None and config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None):
        config.pluginmanager.register(_XdistController(state), "gpuaccept-xdist")


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


def _state(config: pytest.Config) -> SessionState:
    return config.stash[STATE_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per node for every test that takes ``node``: ``test_x[node1]``."""
    if "node" in metafunc.fixturenames:
        nodes = _state(metafunc.config).cluster.nodes
        metafunc.parametrize("node", nodes, ids=nodes)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Node-local tests share an xdist group per node; multi-node tests one group for all nodes."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "node" in callspec.params:
            item.add_marker(pytest.mark.xdist_group(f"node-{callspec.params['node']}"))
        elif item.get_closest_marker("multinode"):
            item.add_marker(pytest.mark.xdist_group("all-nodes"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    state = _state(item.config)
    state.current_item = item
    item.stash[_METRICS] = []
    try:
        return (yield)
    finally:
        state.current_item = None


_METRICS = pytest.StashKey[list[MetricResult]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Classify the outcome (passed / failed / error / skipped) and ship metrics on the report."""
    report = yield
    ours = item.get_closest_marker("acceptance") or set(getattr(item, "fixturenames", ())) & _OUR_FIXTURES
    if ours and (report.when == "call" or report.failed or report.skipped):
        if report.passed:
            verdict = "passed"
        elif report.skipped:
            verdict = "skipped"
        elif call.excinfo is not None and call.excinfo.errisinstance(MeasurementError):
            verdict = "error"
        else:
            verdict = "failed" if report.when == "call" else "error"
        state = _state(item.config)
        callspec = getattr(item, "callspec", None)
        nodes = [callspec.params[k] for k in ("node", "suspect") if callspec is not None and callspec.params.get(k)]
        entry = state.record.tests.get(item.nodeid)
        report.user_properties.append((VERDICT, verdict))
        report.user_properties.append(("gpuaccept_nodes", nodes))
        report.user_properties.append(("gpuaccept_commands", list(entry.commands) if entry else []))
        report.user_properties.append(("gpuaccept_metrics", [m.to_dict() for m in item.stash.get(_METRICS, [])]))
        if state._fingerprints is not None:
            report.user_properties.append(("gpuaccept_fingerprints", state._fingerprints.collected()))
    return report


def _prop(report: pytest.TestReport, key: str) -> Any:
    for name, value in report.user_properties:
        if name == key:
            return value
    return None


class _RecordKeeper:
    """Merges each test's outcome into the run record from its reports (in the xdist controller too,
    where the tests' own process state is out of reach and only the reports arrive)."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self._merged: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        verdict = _prop(report, VERDICT)
        if verdict is None:
            return
        record = self.state.record
        entry = record.test(report.nodeid)
        if entry.verdict in ("failed", "error") and verdict in ("passed", "skipped"):
            return  # a teardown success never hides a failed call
        entry.verdict = verdict
        entry.duration_s = round(entry.duration_s + report.duration, 3)
        entry.nodes = _prop(report, "gpuaccept_nodes") or entry.nodes
        entry.commands = _prop(report, "gpuaccept_commands") or entry.commands
        if report.longrepr is not None and verdict != "passed":
            entry.message = _short(report)
        if report.nodeid not in self._merged:  # a failing teardown reports the same metrics again
            self._merged.add(report.nodeid)
            record.metrics.extend(MetricResult(**raw) for raw in _prop(report, "gpuaccept_metrics") or [])
        for node, fingerprint in (_prop(report, "gpuaccept_fingerprints") or {}).items():
            record.fingerprints.setdefault(node, fingerprint)


def _short(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    crash = getattr(report.longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(report.longrepr)[-2000:]


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, Any] | None:
    """Show could-not-measure as ERROR (``E``), apart from threshold failures (``F``)."""
    if report.when == "call" and report.failed and _prop(report, VERDICT) == "error":
        return "error", "E", ("ERROR", {"red": True})
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None or hasattr(session.config, "workerinput"):
        if state is not None:
            state.close() if state.job is None else None
        return
    status = {0: "passed", 1: "failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests"}.get(
        int(exitstatus), str(exitstatus)
    )
    try:
        if state.started or state.record.errors:
            state.config._gpuaccept_record_path = state.write_record(status)  # type: ignore[attr-defined]
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
    for line in state.drain_lines:
        terminalreporter.write_line(line)
    path = getattr(config, "_gpuaccept_record_path", None)
    if path is not None:
        terminalreporter.write_line(f"run record: {path}")


# ---- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gpuaccept_state(request: pytest.FixtureRequest) -> SessionState:
    return _state(request.config)


@pytest.fixture(scope="session")
def settings(gpuaccept_state: SessionState) -> Settings:
    """The resolved gpuaccept settings."""
    return gpuaccept_state.settings


@pytest.fixture(scope="session")
def thresholds(gpuaccept_state: SessionState) -> Thresholds:
    """The merged thresholds in force."""
    return gpuaccept_state.thresholds


@pytest.fixture(scope="session")
def cluster(gpuaccept_state: SessionState) -> Cluster:
    """Run probes on nodes: ``cluster.run("probe", nodes=[node], ...)``."""
    return gpuaccept_state.cluster


@pytest.fixture(scope="session")
def fingerprints(gpuaccept_state: SessionState) -> Fingerprints:
    """Per-node fingerprints and SKU detection."""
    return gpuaccept_state.fingerprints


@pytest.fixture()
def limits(request: pytest.FixtureRequest, gpuaccept_state: SessionState) -> Checker:
    """Judge metrics against the node's SKU limits; call ``limits.verify()`` at the end."""
    item = request.node
    collected = item.stash.setdefault(_METRICS, [])

    def sink(result: MetricResult) -> None:
        collected.append(result)
        item.config.hook.pytest_gpuaccept_metric(item=item, result=result)

    baseline = item.config.stash.get(BASELINE_KEY, None)
    return Checker(gpuaccept_state.thresholds, gpuaccept_state.fingerprints.sku_of, sink, item.nodeid, baseline)
