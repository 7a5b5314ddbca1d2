"""Run probes as ``srun`` steps inside the session's allocation.

Every step is pinned to its nodes (``--nodelist``), named (so a stuck step can be found and
``scancel``ed), and launched with ``--kill-on-bad-exit`` so one failing rank ends the whole step at
once instead of leaving its peers waiting in a collective until the timeout.
"""

from __future__ import annotations

import os
import signal
import time

from gpuaccept.dispatch.allocation import Allocation
from gpuaccept.dispatch.proc import run_all
from gpuaccept.dispatch.result import ProbeResult, check_step, reported_ranks
from gpuaccept.dispatch.slurm_cli import SlurmError, node_info, slurm_cmd
from gpuaccept.dispatch.step import STEP_ENV_DEFAULTS, Step, probe_argv
from gpuaccept.errors import MeasurementError, ProbeTimeout

__all__ = ["SlurmLauncher"]


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
        container_image: str | None = None,
        container_mounts: str | None = None,
    ) -> None:
        self.allocation = allocation
        self.srun_args = srun_args
        self.container_image = container_image
        self.container_mounts = container_mounts
        if container_image and python is None:
            python = "python3"  # the login node's interpreter path means nothing inside the image
        self._gpus_override = gpus_per_node
        self._python = python
        self._gpus: dict[str, int] = {}

    def nodes(self) -> list[str]:
        return list(self.allocation.nodes)

    def declared_gpus(self, node: str) -> int:
        """What the node declares to Slurm (gres), unless ``--gpus-per-node`` says otherwise.

        Unreadable is an error naming the node, never "0 GPUs": that would skip every GPU test of
        the node and let it pass the run without a single GPU measured.
        """
        if self._gpus_override is not None:
            return self._gpus_override
        if node not in self._gpus:
            try:
                self._gpus[node] = node_info(node).gpus
            except SlurmError as exc:
                message = f"{node}: cannot read its declared GPUs from Slurm: {exc}"
                raise MeasurementError(message, nodes=(node,)) from None
        return self._gpus[node]

    def command(self, step: Step) -> list[str]:
        argv = [
            "srun",
            f"--jobid={self.allocation.job_id}",
            f"--job-name={step.name}",
            f"--nodes={len(step.nodes)}",
            f"--nodelist={','.join(step.nodes)}",
            f"--ntasks={step.ranks}",
            f"--ntasks-per-node={step.tasks_per_node}",
            "--kill-on-bad-exit=1",
        ]
        if step.gpus_per_task:
            argv.append(f"--gpus-per-task={step.gpus_per_task}")
        elif not step.exclusive:
            argv.append("--overlap")
        if self.container_image:
            # pyxis/enroot (Soperator and most Slurm GPU clouds): the image must hold gpuaccept
            # (installed, or mounted and on PYTHONPATH through --container-mounts)
            argv.append(f"--container-image={self.container_image}")
            if self.container_mounts:
                argv.append(f"--container-mounts={self.container_mounts}")
        argv += list(self.srun_args)
        return argv + probe_argv(step.probe, step.args, self._python)

    def run(self, step: Step) -> ProbeResult:
        argv = self.command(step)
        env = {**STEP_ENV_DEFAULTS, **os.environ, **step.env}
        if self.container_image:
            env["GPUACCEPT_CONTAINER_IMAGE"] = self.container_image
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            env.pop(var, None)
        finished = run_all([argv], [env], step.timeout_s, first_signal=signal.SIGTERM)
        result = ProbeResult(
            probe=step.probe,
            command=argv,
            nodes=step.nodes,
            returncode=finished.returncodes[0] if finished.returncodes[0] is not None else -signal.SIGTERM,
            stdout=finished.stdout[0],
            stderr=finished.stderr[0],
            duration_s=finished.duration_s,
        )
        if finished.timed_out:
            left = self._cancel_step(step)
            raise ProbeTimeout(self._timeout_message(step, result, left), nodes=step.nodes)
        return check_step(result, step.ranks)

    def _timeout_message(self, step: Step, result: ProbeResult, left: str) -> str:
        reported = reported_ranks(result.stdout)
        missing = [rank for rank in range(step.ranks) if rank not in reported]
        nodes_missing = sorted({step.nodes[rank // step.tasks_per_node] for rank in missing})
        return (
            f"probe {step.probe} on {', '.join(step.nodes)}: no result within {step.timeout_s:g} s; "
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
