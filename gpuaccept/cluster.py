"""The ``cluster`` fixture's object: what tests call to run probes, whatever the launcher.

``cluster.run(specs.MATMUL, nodes=[node], tasks_per_node=8, gpus_per_task=1)`` builds a ``Step``, hands it
to the launcher, records the exact command and the raw output on the current test (run record and
report), and returns the parsed ``ProbeResult``. In a dry run it prints the command and skips.

Fan-out: when a node-parametrized test asks for its own node's probe, the step runs once on every
node that test has in this session (``FanoutGroup``, from ``state.py``), and each node's case gets its
own slice of it: ``test_x[node1]`` launches one step on node1..nodeN and ``test_x[node2]`` then takes
node2's part without a launch. N nodes cost one step time, one step's RPCs, one login-node process.
A node that did not start or answer gets its own error; the others their results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import pytest

from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.dispatch.slurm_cli import recording
from gpuaccept.dispatch.step import Launcher, Step, shell_join
from gpuaccept.errors import MeasurementError
from gpuaccept.nccl.plan import NodePlan, lost_text
from gpuaccept.probes.specs import ProbeSpec
from gpuaccept.timelimits import TimeLimit, TimeoutRule

if TYPE_CHECKING:  # typing.Unpack for **kwargs is Python 3.12; annotations are not evaluated at run time
    from typing_extensions import Unpack

__all__ = ["NO_GPU_REASON", "Cluster", "FanoutGroup", "StepOptions"]

NO_GPU_REASON = "partition declares no GPUs"
T = TypeVar("T")


def _typed(spec: ProbeSpec[Any], result: ProbeResult) -> ProbeResult:
    """``result`` with every rank's payload validated against the probe's spec where it arrives: a rank whose
    data is not its payload type raises ``PayloadError`` naming the probe, node, rank and field."""
    if spec.payload is None:
        return result
    try:
        result.records = [spec.validate(record) for record in result.records]
    except MeasurementError as exc:
        exc.result = result  # type: ignore[attr-defined]  # the step's output stays on the record
        raise
    return result


def _typed_each(probe: ProbeSpec[Any], values: dict[str, Any]) -> dict[str, Any]:
    """``_typed`` for each node's slice of a fan-out step: a node whose payload is malformed gets its own error."""
    out: dict[str, Any] = {}
    for node, value in values.items():
        try:
            out[node] = _typed(probe, value) if isinstance(value, ProbeResult) else value
        except MeasurementError as exc:
            out[node] = exc
    return out


class StepOptions(TypedDict, total=False):
    """How a probe is launched beyond its name and nodes (defaults: 1 task per node, no GPU)."""

    tasks_per_node: int
    gpus_per_task: int
    args: Iterable[Any]
    env: dict[str, str] | None
    exclusive: bool


@dataclass(frozen=True)
class FanoutGroup:
    """The cases of one test function this process runs, one per node: who shares a fan-out step.

    ``item``: the test case asking now; ``key``: the test function (module, name, parameters other
    than the node); ``nodes``: the nodes of its cases, in allocation order, lost ones left out.
    """

    item: str
    key: Hashable
    nodes: tuple[str, ...]


class Cluster:
    """Probes on nodes: the only way tests reach the machines."""

    def __init__(
        self,
        launcher: Launcher,
        *,
        timeout_rule: TimeoutRule = TimeoutRule(),
        dry_run: bool = False,
        on_step: Callable[[Step, list[str], ProbeResult | None], None] | None = None,
        on_command: Callable[[list[str]], None] | None = None,
        fanout: Callable[[str], FanoutGroup | None] | None = None,
    ) -> None:
        self.launcher = launcher
        self.timeout_rule = timeout_rule
        self.dry_run = dry_run
        self._on_step = on_step
        self._on_command = on_command
        self._fanout = fanout if hasattr(launcher, "run_fanout") else None
        self._shared: dict[tuple[Any, ...], ProbeResult | MeasurementError] = {}
        self._slices: dict[Hashable, dict[str, tuple[Step, ProbeResult | MeasurementError]]] = {}
        self._item = ""
        self._calls: Counter[tuple[Any, ...]] = Counter()

    @property
    def nodes(self) -> list[str]:
        """The nodes under test, less any lost during the run (a cross-node check goes on without them;
        ``across_nodes`` also re-measures when one is lost during its step)."""
        lost = self.lost
        return [n for n in self.launcher.nodes() if n not in lost]

    @property
    def lost(self) -> dict[str, str]:
        """Nodes lost during the run (slurmd gone, taken out of the allocation) and why."""
        return dict(getattr(self.launcher, "lost", {}))

    def plan(self) -> NodePlan:
        """The allocation's nodes and those lost so far: what every multi-node test plans from
        (``nccl.plan``: scales, groups, suspects and pairs among the live nodes only)."""
        return NodePlan(tuple(self.launcher.nodes()), self.lost)

    def across_nodes(self, measure: Callable[[list[str]], T], *, what: str, at_least: int = 2) -> T:
        """``measure(live nodes)`` for a cross-node test; a node lost on the way costs only that node.

        A node lost before: left out of the plan. A node lost during ``measure`` (a step it was in
        fails and the launcher now counts it lost): ``measure`` runs again on the survivors, so they
        get the verdict a clean run of them alone gives (the lost node's own next case names it, as
        ``state._NodeLoss`` does for node-local tests). Fewer than ``at_least`` left: skip naming the loss.
        """
        while True:
            nodes = self.nodes
            if len(nodes) < at_least:
                pytest.skip(f"{what} needs {at_least} nodes: {self._left(len(nodes))}")
            try:
                return measure(nodes)
            except MeasurementError:
                gone = {n: why for n, why in self.lost.items() if n in nodes}
                if not gone:
                    raise
                print(f"{what}: {lost_text(gone)}; measured again on the nodes left")

    def _left(self, live: int) -> str:
        allocated = len(self.launcher.nodes())
        if not self.lost:
            return f"the allocation has {allocated} node{'' if allocated == 1 else 's'}"
        return f"{live} node{'' if live == 1 else 's'} left of {allocated} ({lost_text(self.lost)})"

    @property
    def kind(self) -> str:
        return self.launcher.name

    def gpus_on(self, node: str) -> int:
        """GPUs the node declares (what a healthy node must show)."""
        return self.launcher.declared_gpus(node)

    def require_gpus(self, node: str | None = None) -> int:
        """Skip (the cluster's own declaration: no GPU gres) or return the declared GPU count."""
        nodes = [node] if node else self.nodes
        counts = [self.gpus_on(n) for n in nodes]
        if not any(counts):
            pytest.skip(NO_GPU_REASON)
        return min(counts) if node is None else counts[0]

    def scheduler(self, read: Callable[..., T], *args: Any) -> T:
        """Ask the scheduler from the login node (``read`` is one of ``dispatch.slurm_cli``'s readers:
        ``node_info``, ``partition_info``, ``slurm_cmd``); every Slurm command it ran goes on the current
        test's record, as a probe step's command does."""
        with recording() as ran:
            try:
                return read(*args)
            finally:
                for argv in ran:
                    if self._on_command:
                        self._on_command(argv)

    def run(self, probe: ProbeSpec[Any], *, nodes: Iterable[str], **options: Unpack[StepOptions]) -> ProbeResult:
        """Run the probe's module on ``nodes``; raise ``ProbeError`` if it breaks, ``PayloadError`` if a rank's
        data is not the spec's payload type."""
        nodes = tuple(nodes)
        group = self._fanout(nodes[0]) if self._fanout and len(nodes) == 1 and not self.dry_run else None
        if group is not None and len(group.nodes) > 1:
            return self._run_fanned(group, probe, nodes[0], options)
        step = self._step(probe, nodes, **options)
        if not step.nodes:
            raise MeasurementError(f"probe {probe.name}: no nodes to run on")
        command = self.launcher.command(step)
        if self.dry_run:
            print(f"\n[gpuaccept dry run] {shell_join(command)}")
            if self._on_step:
                self._on_step(step, command, None)
            pytest.skip(f"dry run: {shell_join(command)}")
        result: ProbeResult | None = None
        try:
            result = self.launcher.run(step)
            return _typed(probe, result)
        except MeasurementError as exc:
            result = getattr(exc, "result", None)
            raise
        finally:
            if self._on_step:
                self._on_step(step, command, result)

    def _run_fanned(self, group: FanoutGroup, probe: ProbeSpec[Any], node: str, options: StepOptions) -> ProbeResult:
        """This node's slice of the step its test function runs on all its nodes (launched on first ask).

        Keyed by the test function, the probe and options, and the call's position among the test's
        calls with those: a test that measures twice gets two steps, each node its own slice of each.
        """
        if group.item != self._item:
            self._item = group.item
            self._calls.clear()
        call = (probe.module, *sorted((k, repr(v)) for k, v in options.items()))
        key = (group.key, call, self._calls[call])
        slices = self._slices.setdefault(key, {})
        self._calls[call] += 1
        if node not in slices:
            targets = [n for n in group.nodes if n not in slices and self._same_shape(n, node, options)]
            step = self._step(probe, targets if node in targets else [node, *targets], **options)
            fanned = _typed_each(probe, self.launcher.run_fanout(step))  # type: ignore[attr-defined]
            slices.update({n: (step, value) for n, value in fanned.items()})
        step, value = slices.pop(node)
        if not slices:  # every node took its slice (slices of cases that skipped before asking stay, small)
            self._slices.pop(key, None)
        if self._on_step:
            result = value if isinstance(value, ProbeResult) else getattr(value, "result", None)
            self._on_step(step, self.launcher.command(step, fanout=True), result)  # type: ignore[call-arg]
        if isinstance(value, MeasurementError):
            raise value
        return value

    def _same_shape(self, peer: str, node: str, options: StepOptions) -> bool:
        """A GPU step fans out only to nodes that declare as many GPUs (one srun step has one shape)."""
        if peer == node or not options.get("gpus_per_task"):
            return True
        try:
            return self.gpus_on(peer) == self.gpus_on(node)
        except MeasurementError:
            return False

    def limit(self, probe: ProbeSpec[Any], args: Iterable[Any] = (), gpus_per_task: int = 0) -> TimeLimit:
        """The time limit a step of ``probe`` with these arguments runs under: its declared one
        (``gpuaccept.probes.specs``), as ``--probe-timeout`` scales or caps it."""
        return self.timeout_rule.apply(probe.limit(tuple(str(a) for a in args), gpus_per_task))

    def _step(self, probe: ProbeSpec[Any], nodes: Iterable[str], **options: Unpack[StepOptions]) -> Step:
        args = tuple(str(a) for a in options.get("args", ()))
        gpus = options.get("gpus_per_task", 0)
        limit = self.limit(probe, args, gpus)
        if probe.derived_args is not None:
            args += probe.derived_args(args, limit)
        return Step(
            spec=probe,
            nodes=tuple(nodes),
            tasks_per_node=options.get("tasks_per_node", 1),
            gpus_per_task=gpus,
            args=args,
            env=dict(options.get("env") or {}),
            timeout_s=limit.seconds,
            exclusive=options.get("exclusive", False),
            limit_basis=limit.basis,
            phases=limit.phases,
            hang_s=limit.hang_s,
        )

    def run_shared(self, probe: ProbeSpec[Any], *, nodes: Iterable[str], **options: Unpack[StepOptions]) -> ProbeResult:
        """``run``, once per session for identical arguments; later callers get the same result or error.

        For one measurement judged by several tests (the P2P copies give the bandwidth test and the
        NVLink-errors-under-load test; one fine-tune launch trains DDP and FSDP): measuring twice would
        cost the time twice and could give two tests two different machines' states. A later caller's
        test still gets the command and the raw output in its record.
        """
        nodes = tuple(nodes)
        key = (probe.module, nodes, *sorted((k, repr(v)) for k, v in options.items()))
        if key not in self._shared:
            try:
                self._shared[key] = self.run(probe, nodes=nodes, **options)
            except MeasurementError as exc:
                self._shared[key] = exc
                raise
            return self._shared[key]  # type: ignore[return-value]
        value = self._shared[key]
        if self._on_step:
            step = self._step(probe, nodes, **options)
            result = value if isinstance(value, ProbeResult) else getattr(value, "result", None)
            self._on_step(step, self.launcher.command(step), result)
        if isinstance(value, MeasurementError):
            raise value
        return value

    def run_each(
        self, probe: ProbeSpec[Any], nodes: Iterable[str], **options: Unpack[StepOptions]
    ) -> dict[str, ProbeResult | MeasurementError]:
        """The probe on every node at once; per-node errors are returned, not raised.

        For checks that must say "node2 is broken, node1 is fine" in one test rather than stopping at
        the first dead node. Under Slurm it is one fan-out step for all the nodes (``run_fanout``);
        elsewhere one step per node, run concurrently (one thread waiting on each). The record and
        report hooks are called afterwards from this thread, in node order.
        """
        nodes = list(nodes)
        if len(nodes) > 1 and not self.dry_run and hasattr(self.launcher, "run_fanout"):
            step = self._step(probe, nodes, **options)
            fanned: dict[str, ProbeResult | MeasurementError] = _typed_each(probe, self.launcher.run_fanout(step))
            if self._on_step:
                command = self.launcher.command(step, fanout=True)  # type: ignore[call-arg]
                for node in nodes:
                    value = fanned[node]
                    self._on_step(
                        step, command, value if isinstance(value, ProbeResult) else getattr(value, "result", None)
                    )
            return {node: fanned[node] for node in nodes}
        if len(nodes) <= 1 or self.dry_run:
            out: dict[str, ProbeResult | MeasurementError] = {}
            for node in nodes:
                try:
                    out[node] = self.run(probe, nodes=[node], **options)
                except MeasurementError as exc:
                    out[node] = exc
            return out
        steps = {node: self._step(probe, [node], **options) for node in nodes}
        with ThreadPoolExecutor(max_workers=min(64, len(nodes)), thread_name_prefix="gpuaccept-step") as pool:
            futures = {node: pool.submit(self.launcher.run, step) for node, step in steps.items()}
        results: dict[str, ProbeResult | MeasurementError] = {}
        for node, step in steps.items():
            result: ProbeResult | None = None
            try:
                result = futures[node].result()
                results[node] = _typed(probe, result)
            except MeasurementError as exc:
                results[node] = exc
                result = getattr(exc, "result", None)
            if self._on_step:
                self._on_step(step, self.launcher.command(step), result)
        return results
