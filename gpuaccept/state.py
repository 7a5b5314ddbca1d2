"""Per-session state: settings, thresholds, run record, and the launcher acquired on first need.

Kept apart from the hook functions so the plugin module reads as the flow of a session, and so a
session that never asks for nodes (the selftests' outer pytest) never touches Slurm.

It also knows which cases of a test function this process will run (``fanout_group``: the nodes a
fan-out step covers) and which nodes were lost during the run (``_NodeLoss``: a lost node's next test
errors naming it, its later tests skip giving the reason, the record and the summary name it; a node whose
fingerprint the session's start could not take has each of its tests error with why).
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Generator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from gpuaccept import selftest_hooks
from gpuaccept.cluster import Cluster, FanoutGroup
from gpuaccept.dispatch import SlurmUnusable, choose_launcher, make_launcher
from gpuaccept.dispatch.container import ContainerUnusable
from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.dispatch.slurm_cli import SlurmError, cluster_name, share_node_reads
from gpuaccept.dispatch.step import Step, shell_join, step_limits
from gpuaccept.errors import MeasurementError
from gpuaccept.fingerprints import Fingerprints
from gpuaccept.judging.verdict import verdict_line
from gpuaccept.results.record import RunRecord, record_id
from gpuaccept.results.suite import suite_identity
from gpuaccept.settings import Settings, reports_root
from gpuaccept.signing.files import drop_signature, sign_file
from gpuaccept.signing.keys import SigningKey
from gpuaccept.stalls import Stalls
from gpuaccept.thresholds.loader import Thresholds, load_thresholds
from gpuaccept.thresholds.loosened import loosened

__all__ = ["STATE_KEY", "SessionState", "ran_in_text"]


def ran_in_text(where: dict[str, Any]) -> str:
    """``gpuaccept-dev/bookworm-py3 (oci), Python 3.11.2 /usr/bin/python3``: the image's marker (else its OS)
    and the runtime whose traces the probe saw (enroot leaves none: the marker is the proof there)."""
    image = where.get("image") or "unknown image"
    return f"{image} ({where.get('runtime') or 'no runtime traces'}), Python {where.get('python')}"


class SessionState:
    """What one pytest process knows about the run."""

    def __init__(
        self, config: pytest.Config, settings: Settings, thresholds: Thresholds, signer: SigningKey | None = None
    ) -> None:
        self.config = config
        self.settings = settings
        self.thresholds = thresholds
        #: ``--sign-key``'s key, read at start: the record (and the summary) are signed with it at the end
        self.signer = signer
        self.record = RunRecord()
        self.record.command = shlex.join(["pytest", *config.invocation_params.args])
        self.record.settings = {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(settings).items() if k != "sources"
        } | {"sources": settings.sources}
        self.record.thresholds = {
            "files": [str(f) for f in thresholds.files],
            "digest": thresholds.digest,
            "sha256": dict(thresholds.file_digests),
        }
        for name, value in selftest_hooks.active().items():
            self.record.hook_seen(name, value, "the pytest process")
        self.current_item: pytest.Item | None = None
        self._cluster: Cluster | None = None
        self._fingerprints: Fingerprints | None = None
        self.job: tuple[str, list[str]] | None = None
        self.setup_error: str | None = None
        self._setup_failure: pytest.UsageError | None = None
        if not config.pluginmanager.has_plugin(_SetupGuard.name):
            config.pluginmanager.register(_SetupGuard(self), _SetupGuard.name)
        if not config.pluginmanager.has_plugin(_NodeLoss.name):
            config.pluginmanager.register(_NodeLoss(self), _NodeLoss.name)
        self.drain_lines: list[str] = []
        #: test function -> the nodes of its cases this process runs (set once collection is final)
        self.peers: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._groups: dict[tuple[tuple[str, ...], int], tuple[str, ...]] = {}
        #: the (node, path) pairs that stalled: later storage work there is not run (``stalls.py``)
        self.stalls = Stalls()

    @property
    def reports_dir(self) -> Path:
        return reports_root(self.config) / "reports"

    @property
    def cluster(self) -> Cluster:
        """The cluster, allocating on first use (collection time for node-parametrized tests)."""
        if self._cluster is None:
            if self._setup_failure is not None:  # every later module or test: the same error, no new salloc
                raise self._setup_failure
            kind = choose_launcher(self.settings)
            try:
                launcher = make_launcher(self.settings, kind, job=self.job, notify=self.notify)
            except (SlurmError, SlurmUnusable) as exc:
                container = isinstance(exc, ContainerUnusable)
                self.setup_error = str(exc) if container else f"could not get nodes from Slurm: {exc}"
                self.record.errors.append(self.setup_error)
                self._setup_failure = SlurmUnusable(self.setup_error)
                raise self._setup_failure from None
            self._cluster = Cluster(
                launcher,
                timeout_rule=self.settings.probe_timeout,
                dry_run=self.settings.dry_run,
                on_step=self._on_step,
                on_command=self._record_command,
                fanout=self.fanout_group,
            )
            allocation = getattr(launcher, "allocation", None)
            self.record.cluster = {
                "launcher": launcher.name,
                "nodes": launcher.nodes(),
                "job_id": getattr(allocation, "job_id", None),
                "partition": self.settings.partition,
                "name": cluster_name() if launcher.name == "slurm" else None,
                "container": getattr(launcher, "container_record", lambda: None)(),
            }
        return self._cluster

    def notify(self, message: str) -> None:
        """A progress line on the terminal now, past pytest's output capture (which is on while
        modules are collected, when node-parametrized tests make the allocation)."""
        capman = self.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman is not None else nullcontext():
            print(message, file=sys.stderr, flush=True)

    @property
    def started(self) -> bool:
        return self._cluster is not None

    @property
    def fingerprints(self) -> Fingerprints:
        if self._fingerprints is None:
            self._fingerprints = Fingerprints(self.cluster, self.thresholds, self.settings.sku)
        return self._fingerprints

    def _record_command(self, command: list[str]) -> None:
        """Put a command (a probe step's srun, a scheduler query) on the current test's record."""
        item = self.current_item
        if item is not None:
            entry = self.record.test(record_id(item.nodeid))
            line = shell_join(command)
            if line not in entry.commands:  # one fan-out step reported once per node of a cross-node check
                entry.commands.append(line)

    def _on_step(self, step: Step, command: list[str], result: ProbeResult | None) -> None:
        self._record_command(command)
        entry = self.record.test(record_id(self.current_item.nodeid)) if self.current_item is not None else None
        timing = step_limits(step, result) if result is not None else None
        if entry is not None and timing is not None and timing not in entry.steps:  # a shared step: listed once
            entry.steps.append(timing)
        for rank in result.records if result is not None else []:
            for name, value in rank.test_hooks.items():
                self.record.hook_seen(name, value, f"probes on {rank.node}")
            if entry is not None and rank.ran_in:
                entry.ran_in[rank.node] = ran_in_text(rank.ran_in)
        item = self.current_item
        self.config.hook.pytest_gpuaccept_step_finished(item=item, step=step, command=command, result=result)

    def fanout_group(self, node: str) -> FanoutGroup | None:
        """Who shares the current test case's step for ``node``; None: run it on that node alone.

        Under pytest-xdist every worker runs per node: ``--dist loadgroup`` hands a worker one node's
        group at a time and it cannot know which nodes it will get next, so a fan-out there would
        measure nodes that other workers are measuring at the same moment.
        """
        item = self.current_item
        if item is None or hasattr(self.config, "workerinput"):
            return None
        key = function_key(item)
        if key is None or item.callspec.params["node"] != node:  # type: ignore[attr-defined]
            return None
        lost = self.cluster.lost
        nodes = self._groups.get((key, len(lost)))  # built once per test function, not once per case
        if nodes is None:
            nodes = self._groups[(key, len(lost))] = tuple(n for n in self.peers.get(key, (node,)) if n not in lost)
        return FanoutGroup(item.nodeid, key, nodes)

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.launcher.close()

    def write_record(self, status: str) -> Path:
        self.record.status = status
        self.record.suite = suite_identity()  # here, not at start: a session that never runs asks git nothing
        if len(self.thresholds.files) > 1:
            try:
                packaged = load_thresholds(defaults=self.thresholds.files[0])
                self.record.loosened = loosened(self.thresholds, packaged)
            except Exception as exc:  # the record is written whatever else fails
                self.record.errors.append(f"could not compare the site limits with the packaged ones: {exc}")
        self.record.accepted, self.record.verdict = verdict_line(self.record)
        if self._cluster is not None:
            self.record.cluster["lost_nodes"] = self._cluster.lost
            self.record.cluster["srun_steps"] = getattr(self._cluster.launcher, "steps_launched", None)
        if self._fingerprints is not None:
            self.record.fingerprints = self._fingerprints.collected()
        job_id = self.record.cluster.get("job_id")
        path = self.settings.run_record or self.record.default_path(self.reports_dir, job_id)
        # a dry run or a collection measured nothing: never the ``latest.json`` a baseline would compare with
        rehearsal = self.settings.dry_run or bool(self.config.option.collectonly)
        written = self.record.write(path, latest=not rehearsal, unique=self.settings.run_record is None)
        for target in (written, written.parent / "latest.json") if not rehearsal else (written,):
            # signed before the listeners run: a summary that cannot be drawn leaves the record signed
            if self.signer is not None:
                sign_file(target, self.signer, "record")
            else:
                drop_signature(target)  # a signature of the record this one replaced would read as tampering
        self.config.hook.pytest_gpuaccept_record_written(path=written, record=self.record, signer=self.signer)
        return written


class _SetupGuard:
    """Turns a failed allocation into the usage error it is (exit code 4), at once and once.

    The allocation is made when the first node-parametrized module is collected, inside pytest's
    collection-error wrapper: left there, the error would be reported once per test module with a
    traceback each, and the run would end as "interrupted" (exit 2). Raised from a wrapper around that
    report it stops the session with one line naming the cause, before any test runs. A test that
    asks for the cluster at run time stops the session the same way once its error is reported.
    """

    name = "gpuaccept-setup-guard"

    def __init__(self, state: SessionState) -> None:
        self.state = state

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        if report.failed and self.state._setup_failure is not None:
            raise self.state._setup_failure
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and self.state._setup_failure is not None:
            raise self.state._setup_failure


def function_key(item: pytest.Item) -> tuple[str, ...] | None:
    """A node-parametrized case's test function with its other parameters; None for other tests."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "node" not in callspec.params:
        return None
    others = tuple(f"{k}={v!r}" for k, v in sorted(callspec.params.items()) if k != "node")
    return (str(item.path), getattr(item, "originalname", item.name), *others)


def _case_node(report: pytest.TestReport) -> str | None:
    """The node of a node-parametrized case's report (``test_x[node3]``), else None."""
    name = report.nodeid.rsplit("::", 1)[-1]
    if not name.endswith("]") or "[" not in name:
        return None
    return name[name.index("[") + 1 : -1] or None


class _NodeLoss:
    """Nodes lost during the run: the fan-out groups, the skips, and the summary line.

    A lost node's first case after the loss runs and errors naming the node (the dispatcher refuses
    to launch on it, or its slice of a step says it did not start); its later cases skip with the
    reason, so a dead node costs one error and no timeouts, and the survivors go on.
    """

    name = "gpuaccept-node-loss"

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.announced: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        peers: dict[tuple[str, ...], list[str]] = {}
        for item in session.items:
            key = function_key(item)
            if key is not None:
                peers.setdefault(key, []).append(item.callspec.params["node"])  # type: ignore[attr-defined]
        self.state.peers = {key: tuple(nodes) for key, nodes in peers.items()}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # one scontrol read of every node per node-parametrized test function (not under xdist, where
        # a worker's cases change function at every case)
        key = function_key(item)
        share_node_reads(key if not hasattr(item.config, "workerinput") else None)
        if not self.state.started or key is None:
            return
        node = item.callspec.params["node"]  # type: ignore[attr-defined]
        taken = self.state._fingerprints
        why = taken.failure(node) if taken is not None else None
        if why is not None:  # dead at the session's start: each of its tests errors with why, never FAILED
            raise MeasurementError(why, nodes=(node,))
        reason = self.state.cluster.lost.get(node)
        if reason is not None and node in self.announced:
            pytest.skip(f"{node} was lost during the run: {reason}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A lost node is announced by the first of its cases that errors after the loss; a case that
        skipped for a reason of its own (no GPU declared) leaves the naming to the next one."""
        node = _case_node(report)
        if node is not None and report.failed and self.state.started and node in self.state.cluster.lost:
            self.announced.add(node)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        share_node_reads(None)  # drains and the record read the nodes as they are now

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.state.started:
            for node, reason in sorted(self.state.cluster.lost.items()):
                terminalreporter.write_line(f"{node}: lost during the run: {reason}", red=True)


STATE_KEY = pytest.StashKey[SessionState]()
