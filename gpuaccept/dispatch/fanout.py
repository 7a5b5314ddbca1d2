"""One srun step for every node of a node-parametrized test, cut back into one result per node.

A test written for one node (``cluster.run(specs.HYGIENE, nodes=[node])``) is run once for all its nodes
(``Cluster.run``): N nodes then cost one step's time and one step's RPCs instead of N of each. The step
runs with ``--kill-on-bad-exit=0`` (one node's crash must not end its peers' measurements), ``--label``
(every output line carries its task id) and ``-v`` (srun then says which tasks it launched on which
host, and which host's tasks failed to start or exited badly). Each task runs its probe through
``gpuaccept.probes._pernode``, which gives it the rank variables of a step that held its node alone,
so a probe sees exactly what a per-node step would show it.

This module only reads that output: which tasks ran where, what each node's tasks printed, and how
each node ended. What a node's ending means (a result, a probe error, a node lost) is decided here
too, so the launcher and the cluster only route the per-node outcomes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuaccept.dispatch.result import ProbeResult, check_step, parse_records, reported_ranks, timeout_text
from gpuaccept.errors import MeasurementError, ProbeError, ProbeTimeout
from gpuaccept.probes._pernode import TASK_SENTINEL

__all__ = ["FanoutOutput", "launched_any", "lost_from_stderr", "parse_fanout", "slice_results"]

#: ``srun: launching StepId=2.0 on host node1, 2 tasks: [0-1]`` (srun -v, Slurm 22.05 to 26.05)
_LAUNCHING = re.compile(r"^srun: launching StepId=\S+ on host (?P<host>\S+), \d+ tasks?: \[?(?P<tasks>[\d,\-]+)\]?")
#: ``srun: error: Task launch for StepId=2.2 failed on node node2: Communication connection failure``
_LAUNCH_FAILED = re.compile(r"Task launch for StepId=\S+ failed on node (?P<host>[^\s:]+): (?P<why>.*)$")
#: ``srun: error: node3: task 5: Exited with exit code 3`` / ``srun: error: node3: tasks 4-5: Killed``
_TASK_ERROR = re.compile(r"^srun: error: (?P<host>[^\s:]+): tasks? (?P<tasks>[\d,\-]+): (?P<why>.*)$")
_EXIT_CODE = re.compile(r"exit code (\d+)")
_SIGNALLED = {"Killed": -9, "Terminated": -15, "Aborted": -6, "Segmentation": -11, "Bus": -7}
#: ``  3: text`` -- srun --label pads the task id to the width of the largest one
_LABEL = re.compile(r"^\s*(?P<task>\d+): ?(?P<text>.*)$")


def _tasks(spec: str) -> list[int]:
    """``0-1,4`` -> [0, 1, 4]."""
    out: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


@dataclass
class FanoutOutput:
    """What srun said about each node of the step."""

    tasks_of: dict[str, list[int]] = field(default_factory=dict)
    stdout_of: dict[str, list[str]] = field(default_factory=dict)
    stderr_of: dict[str, list[str]] = field(default_factory=dict)
    launch_failed: dict[str, str] = field(default_factory=dict)
    task_errors: dict[str, str] = field(default_factory=dict)
    exit_code: dict[str, int] = field(default_factory=dict)

    @property
    def launched(self) -> bool:
        return bool(self.tasks_of)


def parse_fanout(stdout: str, stderr: str) -> FanoutOutput:
    """Split a labelled, verbose srun's output by node."""
    out = FanoutOutput()
    for line in stderr.splitlines():
        if (m := _LAUNCHING.match(line)) is not None:
            out.tasks_of[m["host"]] = _tasks(m["tasks"])
    for line in stdout.splitlines():  # tasks srun -v did not place: where their slurmd said they run
        if (m := _LABEL.match(line)) is not None and m["text"].startswith(TASK_SENTINEL):
            task, node = int(m["task"]), m["text"][len(TASK_SENTINEL) :].strip()
            if node and not any(task in tasks for tasks in out.tasks_of.values()):
                out.tasks_of.setdefault(node, []).append(task)
    node_of = {task: node for node, tasks in out.tasks_of.items() for task in tasks}
    for line in stderr.splitlines():
        if (m := _LAUNCH_FAILED.search(line)) is not None:
            out.launch_failed[m["host"]] = m["why"].strip()
        elif (m := _TASK_ERROR.match(line)) is not None:
            why = m["why"].strip()
            out.task_errors[m["host"]] = f"task(s) {m['tasks']}: {why}"
            code = _EXIT_CODE.search(why)
            out.exit_code[m["host"]] = int(code.group(1)) if code else _SIGNALLED.get(why.split()[0], 1)
        elif (m := _LABEL.match(line)) is not None and int(m["task"]) in node_of:
            out.stderr_of.setdefault(node_of[int(m["task"])], []).append(line)
    for line in stdout.splitlines():
        if (m := _LABEL.match(line)) is not None and int(m["task"]) in node_of:
            if not m["text"].startswith(TASK_SENTINEL):
                out.stdout_of.setdefault(node_of[int(m["task"])], []).append(m["text"])
    return out


def launched_any(stdout: str, stderr: str) -> bool:
    """Whether srun started (or tried to start) tasks at all, rather than being refused the step."""
    return "launching StepId=" in stderr or TASK_SENTINEL in stdout or bool(lost_from_stderr(stderr))


def lost_from_stderr(stderr: str) -> dict[str, str]:
    """Nodes whose slurmd did not take the step (``Task launch ... failed on node X: why``)."""
    return {m["host"]: m["why"].strip() for line in stderr.splitlines() if (m := _LAUNCH_FAILED.search(line))}


def slice_results(
    whole: ProbeResult, nodes: tuple[str, ...], tasks_per_node: int, *, timed_out: bool, timeout_s: float
) -> dict[str, ProbeResult | MeasurementError]:
    """Each node's own result or error from the one step that ran on all of them.

    A node's result holds only its tasks' lines (labels stripped), so its test's record and report
    show what a step on that node alone would have shown; its ranks are the node-local ones
    (``_pernode`` set them). Errors name the node and say what happened there.
    """
    parsed = parse_fanout(whole.stdout, whole.stderr)
    results: dict[str, ProbeResult | MeasurementError] = {}
    for node in nodes:
        stdout = "\n".join(parsed.stdout_of.get(node, []))
        stderr = "\n".join(parsed.stderr_of.get(node, []))
        if node in parsed.task_errors:
            stderr = f"{stderr}\nsrun: {node}: {parsed.task_errors[node]}".strip()
        part = ProbeResult(
            probe=whole.probe,
            command=whole.command,
            nodes=(node,),
            returncode=parsed.exit_code.get(node, 0),
            stdout=stdout + "\n" if stdout else "",
            stderr=stderr,
            duration_s=whole.duration_s,
            ended_at=whole.ended_at,
            stop_reason=whole.stop_reason,
        )
        results[node] = _judge_slice(part, node, parsed, tasks_per_node, timed_out, timeout_s)
    return results


def _judge_slice(
    part: ProbeResult,
    node: str,
    parsed: FanoutOutput,
    tasks_per_node: int,
    timed_out: bool,
    timeout_s: float,
) -> ProbeResult | MeasurementError:
    if node in parsed.launch_failed:
        error: MeasurementError = ProbeError(
            f"probe {part.probe} on {node}: the step did not start on {node} "
            f"(its slurmd did not take it: {parsed.launch_failed[node]})",
            nodes=(node,),
        )
        error.lost = parsed.launch_failed[node]  # type: ignore[attr-defined]
        return error
    if node not in parsed.tasks_of:
        return ProbeError(f"probe {part.probe} on {node}: srun launched no task on {node}", nodes=(node,))
    if timed_out and len(reported_ranks(part.stdout)) < tasks_per_node:
        missing = sorted(set(range(tasks_per_node)) - reported_ranks(part.stdout))
        timeout = ProbeTimeout(
            f"{timeout_text(part, node, timeout_s)}; ranks {missing} on {node} did not finish",
            nodes=(node,),
        )
        timeout.result = part  # type: ignore[attr-defined]  # what the ranks wrote: progress, finished phases
        return timeout
    if timed_out:  # every rank reported before the deadline: their lines stand
        try:
            part.records = parse_records(part.probe, part.stdout, tasks_per_node, (node,))
        except MeasurementError as exc:
            return exc
        return part
    try:
        return check_step(part, tasks_per_node)
    except MeasurementError as exc:
        return exc
