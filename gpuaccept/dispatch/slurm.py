"""Run probes as ``srun`` steps inside the session's allocation.

Every step is pinned to its nodes (``--nodelist``), named (so a stuck step can be found and
``scancel``ed), and launched with ``--kill-on-bad-exit`` so one failing rank ends the whole step at
once instead of leaving its peers waiting in a collective until the timeout. A fan-out step (one
per-node probe on many nodes at once, ``run_fanout``) is the exception: there the nodes are
independent, and one node's crash must end only that node's part (``dispatch/fanout.py``).

A node whose slurmd does not take a step, or that Slurm has taken out of the allocation (the
session's allocation is made with ``--no-kill``, so Slurm shrinks it instead of ending it), is
*lost*: ``lost`` names it with the reason, and no later step is sent to it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from gpuaccept.dispatch.allocation import Allocation
from gpuaccept.dispatch.container import (
    HOST_QUERY,
    Container,
    ContainerUnusable,
    parse_host_lines,
    runtime_versions,
)
from gpuaccept.dispatch.fanout import launched_any, lost_from_stderr, slice_results
from gpuaccept.dispatch.proc import run_all
from gpuaccept.dispatch.result import ProbeResult, check_step, parse_records, reported_ranks, timeout_text
from gpuaccept.dispatch.slurm_cli import SlurmError, expand_hostlist, gres_gpus, key_values, node_info, slurm_cmd
from gpuaccept.dispatch.step import PERNODE, STEP_ENV_DEFAULTS, TASKS, Step, probe_argv, watch
from gpuaccept.errors import MeasurementError, ProbeError, ProbeTimeout, ToolMissing
from gpuaccept.probes.specs import CONTAINER, CONTAINER_HOST_QUERY, container_start
from gpuaccept.timelimits import TimeoutRule

__all__ = ["SlurmLauncher"]

#: srun's words when a step cannot be created *yet*: seen on 22.05 in the seconds after slurmctld restarts
#: with its state kept, until the nodes have registered again (tests/selftest/test_chaos.py); srun
#: gives up at once instead of waiting, so the launch is tried again for up to ``STEP_RETRY_S``
TRANSIENT_STEP = re.compile(
    r"Unable to create step for job \d+: (Memory required by task is not available|Requested nodes are busy)"
)
STEP_RETRY_S = 60.0


class SlurmLauncher:
    """The Launcher for a real Slurm cluster."""

    name = "slurm"

    def __init__(
        self,
        allocation: Allocation,
        *,
        srun_args: tuple[str, ...] = (),
        gpus_per_node: int | None = None,
        python: str | None = None,
        container: Container | None = None,
        timeout_rule: TimeoutRule = TimeoutRule(),
    ) -> None:
        self.allocation = allocation
        #: ``--probe-timeout``: what it does to the limits of the launcher's own steps (the container's start)
        self.timeout_rule = timeout_rule
        self.srun_args = srun_args
        self.container = container
        #: node -> what the container start check found there: runtimes, host Python, the image inside
        self.container_nodes: dict[str, dict[str, Any]] = {}
        self._gpus_override = gpus_per_node
        self._python = python
        self._gpus: dict[str, int] = {}
        #: node -> why it is lost (did not take a step, or left the allocation); no step goes there again
        self.lost: dict[str, str] = {}
        #: srun steps started by this process (what the scale figures count)
        self.steps_launched = 0

    def nodes(self) -> list[str]:
        return list(self.allocation.nodes)

    def declared_gpus(self, node: str) -> int:
        """What the node declares to Slurm (gres), unless ``--gpus-per-node`` says otherwise.

        Unreadable is an error naming the node, never "0 GPUs": that would skip every GPU test of
        the node and let it pass the run without a single GPU measured.
        """
        if self._gpus_override is not None:
            return self._gpus_override
        if not self._gpus:  # every node of the allocation in one RPC (not one scontrol per node)
            self._gpus = self._all_declared_gpus()
        if node not in self._gpus:
            try:
                self._gpus[node] = node_info(node).gpus
            except SlurmError as exc:
                message = f"{node}: cannot read its declared GPUs from Slurm: {exc}"
                raise MeasurementError(message, nodes=(node,)) from None
        return self._gpus[node]

    def _all_declared_gpus(self) -> dict[str, int]:
        try:
            lines = slurm_cmd(["scontrol", "-o", "show", "node"]).splitlines()
        except SlurmError:
            return {}  # each node is then asked alone, and an error names it
        ours = set(self.allocation.nodes)
        found = {}
        for line in lines:
            fields = key_values(line)
            if fields.get("NodeName") in ours:
                found[fields["NodeName"]] = gres_gpus(fields.get("Gres", ""))
        return found

    def command(self, step: Step, *, fanout: bool = False) -> list[str]:
        """The srun command; ``fanout``: one independent per-node probe on every node of the step."""
        in_image = self._in_image(step)
        # one srun task per node that starts the node's ranks itself (probes/_tasks.py): Slurm's OCI
        # support starts one task per node in a container
        spawned = in_image and self.container is not None and self.container.kind == "oci" and step.tasks_per_node > 1
        per_node = 1 if spawned else step.tasks_per_node
        argv = [
            "srun",
            f"--jobid={self.allocation.job_id}",
            f"--job-name={step.name}",
            f"--nodes={len(step.nodes)}",
            f"--nodelist={','.join(step.nodes)}",
            f"--ntasks={per_node * len(step.nodes)}",
            f"--ntasks-per-node={per_node}",
        ]
        argv += ["--kill-on-bad-exit=0", "--label", "-v"] if fanout else ["--kill-on-bad-exit=1"]
        if step.gpus_per_task and spawned:
            argv.append(f"--gpus-per-node={step.gpus_per_task * step.tasks_per_node}")
        elif step.gpus_per_task:
            argv.append(f"--gpus-per-task={step.gpus_per_task}")
        elif not step.exclusive:
            argv.append("--overlap")
        if in_image and self.container is not None:
            # the image must hold gpuaccept and its packages (installed, or mounted and on its PYTHONPATH)
            argv += self.container.srun_args(self.allocation.job_id)
        argv += list(self.srun_args)
        # inside the image its own python3: the login node's interpreter path means nothing there
        python = "python3" if in_image else self._python
        module, args = (PERNODE, (step.spec.module, *step.args)) if fanout else (step.spec.module, step.args)
        if spawned:
            module, args = TASKS, (str(step.tasks_per_node), str(step.gpus_per_task), module, *args)
        return argv + probe_argv(module, args, python)

    def _in_image(self, step: Step) -> bool:
        return self.container is not None and step.spec.host_side is None

    def _refuse_host_side(self, step: Step) -> None:
        """A host-side probe (its spec's ``host_side``) on nodes whose host has no suite outside the image: not
        run, named with the reason, never an error of a healthy node."""
        if self.container is None or step.spec.host_side is None:
            return
        lacking = tuple(n for n in step.nodes if self.container_nodes.get(n, {}).get("host_python") == "no")
        if lacking:
            detail = f"it {step.spec.host_side}; the suite runs in the image ({self.container.option})"
            tool = "gpuaccept for the host's Python"
            raise ToolMissing(f"{step.probe} on the host side", tool, detail, nodes=lacking)

    def start_container(self, notify: Callable[[str], None]) -> None:
        """Before the first test: every node has the image's paths and a runtime, and the image starts and
        imports the suite there (under pyxis this imports it, once per node). ``ContainerUnusable`` names
        the node and gives the runtime's words."""
        container = self.container
        if container is None or self.allocation.job_id.startswith("$"):
            return
        nodes = self.nodes()
        base = [
            "srun",
            f"--jobid={self.allocation.job_id}",
            f"--nodes={len(nodes)}",
            f"--nodelist={','.join(nodes)}",
            f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            "--overlap",
            "--kill-on-bad-exit=0",
            *self.srun_args,
        ]
        host_python = self._python or sys.executable
        query = [*base, "sh", "-c", HOST_QUERY, "sh", host_python, *container.local_paths()]
        asked = self.timeout_rule.apply(CONTAINER_HOST_QUERY)
        found = run_all([query], [dict(os.environ)], asked.seconds, first_signal=signal.SIGTERM)
        host = parse_host_lines(found.stdout[0])
        where = f"{container.option} {container.image}"
        silent = [n for n in nodes if n not in host]
        if silent:
            said = found.stderr[0].strip()[-400:]
            raise ContainerUnusable(f"{where}: the host-side query answered nothing from {', '.join(silent)}: {said}")
        for node in nodes:
            if host[node].get("missing"):
                raise ContainerUnusable(f"{where}: {node} has no {host[node]['missing'].replace(',', ', ')}")
            if container.kind == "oci" and not (host[node].get("runc") or host[node].get("crun")):
                raise ContainerUnusable(f"{where}: {node} has neither runc nor crun for Slurm's oci.conf")
        notify(
            f"gpuaccept: starting {container.image} on {len(nodes)} node(s)"
            + ("" if container.local else " (pyxis imports it once per node; later steps reuse it)")
        )
        image_args = container.srun_args(self.allocation.job_id)
        inside = [*base, "--label", *image_args, *probe_argv(CONTAINER.module, (), "python3")]
        limit = self.timeout_rule.apply(container_start(container.local))
        started = run_all([inside], [{**STEP_ENV_DEFAULTS, **os.environ}], limit.seconds, first_signal=signal.SIGTERM)
        stderr = started.stderr[0].strip()
        if "unrecognized option" in stderr and container.kind == "pyxis":
            raise ContainerUnusable(
                f"{where}: this cluster's srun has no --container-image (pyxis is not installed): {stderr[-300:]}"
            )
        try:  # a PayloadError too (the image's probe wrote what its contract does not hold): its words are said
            records = [
                CONTAINER.validate(r)
                for r in parse_records(CONTAINER.name, started.stdout[0], len(nodes), tuple(nodes))
            ]
        except ProbeError as exc:
            records, stderr = [], f"{stderr}\n{exc}"
        inside_of = {r.node: dict(CONTAINER.read(r)["where"]) for r in records}
        failed = [n for n in nodes if n not in inside_of]
        if started.timed_out or started.returncodes[0] != 0 or failed:
            said = " | ".join(line.strip() for line in stderr[-600:].splitlines() if line.strip())
            why = f"no answer within {limit.seconds:g} s ({limit.basis})" if started.timed_out else said or "no output"
            raise ContainerUnusable(
                f"{where}: the image did not start, or its python3 cannot import gpuaccept, on "
                f"{', '.join(failed or nodes)}: {why}"
            )
        for node in nodes:
            self.container_nodes[node] = {
                **inside_of[node],
                "runtime_versions": runtime_versions(host[node], container.kind),
                "host_python": host[node].get("host_python"),
            }

    def container_record(self) -> dict[str, Any] | None:
        """The image and what every node runs it with, for the run record and the summary."""
        if self.container is None:
            return None
        return {**self.container.describe(), "nodes": self.container_nodes}

    def _env(self, step: Step) -> dict[str, str]:
        env = {**STEP_ENV_DEFAULTS, **os.environ, **step.env, "GPUACCEPT_TASKS_PER_NODE": str(step.tasks_per_node)}
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(var, None)
        return env

    def _launch(self, step: Step, argv: list[str]) -> tuple[ProbeResult, bool]:
        """One srun step; a step Slurm cannot create yet (``TRANSIENT_STEP``) is asked for again."""
        self.steps_launched += 1
        deadline = time.monotonic() + STEP_RETRY_S
        while True:
            result, timed_out = self._srun(step, argv)
            transient = not timed_out and result.returncode != 0 and TRANSIENT_STEP.search(result.stderr)
            if not transient or launched_any(result.stdout, result.stderr) or time.monotonic() > deadline:
                return result, timed_out
            time.sleep(2)

    def _srun(self, step: Step, argv: list[str]) -> tuple[ProbeResult, bool]:
        finished = run_all([argv], [self._env(step)], step.timeout_s, first_signal=signal.SIGTERM, watch=watch(step))
        result = ProbeResult(
            probe=step.probe,
            command=argv,
            nodes=step.nodes,
            returncode=finished.returncodes[0] if finished.returncodes[0] is not None else -signal.SIGTERM,
            stdout=finished.stdout[0],
            stderr=finished.stderr[0],
            duration_s=finished.duration_s,
            ended_at=finished.ended_at,
            stop_reason=finished.stop_reason,
        )
        return result, finished.timed_out

    def run(self, step: Step) -> ProbeResult:
        self._refuse_lost(step)
        self._refuse_host_side(step)
        result, timed_out = self._launch(step, self.command(step))
        if timed_out:
            left = self._cancel_step(step)
            timeout = ProbeTimeout(self._timeout_message(step, result, left), nodes=step.nodes)
            timeout.result = result  # type: ignore[attr-defined]  # what the ranks wrote: progress, finished phases
            raise timeout
        if result.returncode != 0:
            self._find_lost(step, result)
            if any(n in self.lost for n in step.nodes):
                error = ProbeError(
                    f"probe {step.probe} on {', '.join(step.nodes)}: "
                    + "; ".join(f"{n} lost: {self.lost[n]}" for n in step.nodes if n in self.lost),
                    nodes=tuple(n for n in step.nodes if n in self.lost),
                )
                error.result = result  # type: ignore[attr-defined]  # the report attaches the full output
                raise error
        return check_step(result, step.ranks)

    def run_fanout(self, step: Step) -> dict[str, ProbeResult | MeasurementError]:
        """The per-node probe of ``step`` on all its nodes in one srun step: each node's result or error.

        A node lost before the step gets its reason without a launch. When Slurm refuses the whole
        step (a node left the allocation since the last step), the lost nodes are found and the step
        runs once more on the others: at most two steps, whatever the node count.
        """
        self._refuse_host_side(step)
        results: dict[str, ProbeResult | MeasurementError] = {
            n: self._lost_error(step, n) for n in step.nodes if n in self.lost
        }
        nodes = tuple(n for n in step.nodes if n not in self.lost)
        for attempt in range(2):
            if not nodes:
                break
            part = dataclasses.replace(step, nodes=nodes)
            whole, timed_out = self._launch(part, self.command(part, fanout=True))
            if timed_out:
                self._cancel_step(part)
            sliced = slice_results(whole, nodes, step.tasks_per_node, timed_out=timed_out, timeout_s=step.timeout_s)
            if timed_out or launched_any(whole.stdout, whole.stderr) or attempt:
                for node, error in sliced.items():
                    reason = getattr(error, "lost", None)
                    if isinstance(error, MeasurementError) and reason:
                        self.lost.setdefault(node, f"its slurmd did not take a step ({reason})")
                return results | sliced
            self._find_lost(part, whole)  # srun launched nothing: did Slurm take nodes out of the job?
            survivors = tuple(n for n in nodes if n not in self.lost)
            if survivors == nodes:  # refused for another reason: every node gets srun's own words
                error = ProbeError(
                    f"probe {step.probe}: srun started no task on {', '.join(nodes)}: {whole.stderr.strip()[-800:]}",
                    nodes=nodes,
                )
                return results | dict.fromkeys(nodes, error)
            results |= {n: self._lost_error(step, n) for n in nodes if n in self.lost}
            nodes = survivors
        return results

    def _lost_error(self, step: Step, node: str) -> MeasurementError:
        return ProbeError(f"probe {step.probe}: {node} was lost during the run: {self.lost[node]}", nodes=(node,))

    def _refuse_lost(self, step: Step) -> None:
        gone = [n for n in step.nodes if n in self.lost]
        if gone:
            raise ProbeError(
                f"probe {step.probe}: not launched: "
                + "; ".join(f"{n} was lost during the run: {self.lost[n]}" for n in gone),
                nodes=tuple(gone),
            )

    def _find_lost(self, step: Step, result: ProbeResult) -> None:
        """After a failed step: the nodes whose slurmd refused it, and the nodes Slurm took out of the job."""
        for node, why in lost_from_stderr(result.stderr).items():
            self.lost.setdefault(node, f"its slurmd did not take a step ({why})")
        if launched_any(result.stdout, result.stderr) or self.allocation.job_id.startswith("$"):
            return
        try:
            held = set(expand_hostlist(slurm_cmd(["squeue", "-h", "-j", self.allocation.job_id, "-o", "%N"]).strip()))
        except SlurmError:
            return
        for node in step.nodes:
            if held and node not in held:
                self.lost.setdefault(node, f"Slurm took it out of job {self.allocation.job_id} ({self._state(node)})")

    @staticmethod
    def _state(node: str) -> str:
        try:
            info = node_info(node)
        except SlurmError as exc:
            return f"state unreadable: {exc}"
        return f"state {info.state}" + (f", reason: {info.reason}" if info.reason else "")

    def _timeout_message(self, step: Step, result: ProbeResult, left: str) -> str:
        reported = reported_ranks(result.stdout)
        missing = [rank for rank in range(step.ranks) if rank not in reported]
        nodes_missing = sorted({step.nodes[rank // step.tasks_per_node] for rank in missing})
        return (
            f"{timeout_text(result, ', '.join(step.nodes), step.timeout_s)}; "
            f"step {step.name} {left or 'cancelled'}; ranks {missing} on {', '.join(nodes_missing)} did not finish"
        )

    def _cancel_step(self, step: Step) -> str:
        """``scancel`` the named step if srun's own termination left it behind; wait until it is gone.

        Returns '' once it is gone, else what Slurm said: a step that may still hold the node's GPUs
        must be named in the test's error, not reported as cancelled.
        """
        deadline = time.monotonic() + 30
        problem = "still listed by squeue 30 s after scancel"
        while time.monotonic() < deadline:
            try:
                rows = slurm_cmd(["squeue", "-h", "-s", "-j", self.allocation.job_id, "-o", "%i|%j"]).splitlines()
            except SlurmError as exc:
                return f"may still run (squeue cannot tell: {exc})"
            ids = [row.split("|")[0] for row in rows if row.endswith("|" + step.name)]
            if not ids:
                return ""
            for step_id in ids:
                try:
                    slurm_cmd(["scancel", "--signal=KILL", step_id])
                except SlurmError as exc:
                    problem = f"could not be cancelled ({exc})"
            time.sleep(1)
        return problem

    def close(self) -> None:
        self.allocation.release()
