"""Run probes as subprocesses on this machine, with the same interface as the Slurm launcher.

For a workstation or a single GPU server without Slurm (``--launcher auto`` picks it only when no
Slurm client is installed at all; ``--launcher local`` forces it). Ranks get ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and, for GPU steps, their own ``CUDA_VISIBLE_DEVICES`` slice,
exactly as ``srun --gpus-per-task`` would give them.
"""

from __future__ import annotations

import os
import shlex
import socket
import time

from gpuaccept.dispatch.proc import run_all
from gpuaccept.dispatch.result import ProbeResult, check_step, reported_ranks, timeout_text
from gpuaccept.dispatch.step import STEP_ENV_DEFAULTS, Step, probe_argv, watch
from gpuaccept.errors import ProbeError, ProbeTimeout

__all__ = ["LocalLauncher", "local_gpu_count"]


def local_gpu_count() -> int:
    """GPUs NVML sees here (0 without a driver or without nvidia-ml-py)."""
    try:
        import pynvml  # type: ignore[import-untyped]

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


class LocalLauncher:
    """The Launcher for this machine alone: one node, named after the host."""

    name = "local"

    def __init__(self, *, gpus_per_node: int | None = None, python: str | None = None) -> None:
        self.node = socket.gethostname().split(".")[0]
        self._gpus = gpus_per_node if gpus_per_node is not None else local_gpu_count()
        self._python = python
        self._port = 29400 + os.getpid() % 500

    def nodes(self) -> list[str]:
        return [self.node]

    def declared_gpus(self, node: str) -> int:
        return self._gpus

    def _visible(self) -> list[str]:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return [v for v in visible.split(",") if v] if visible else [str(i) for i in range(self._gpus)]

    def _rank_envs(self, step: Step) -> list[dict[str, str]]:
        if step.nodes != (self.node,):
            raise ProbeError(f"probe {step.probe}: the local launcher only has node {self.node}, not {step.nodes}")
        self._port += 1
        base = {**STEP_ENV_DEFAULTS, **os.environ, **step.env, "GPUACCEPT_NODE": self.node}
        visible = self._visible()
        envs = []
        for rank in range(step.ranks):
            env = dict(base)
            env.update(
                RANK=str(rank),
                WORLD_SIZE=str(step.ranks),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(step.tasks_per_node),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(self._port),
            )
            if step.gpus_per_task:
                chunk = visible[rank * step.gpus_per_task : (rank + 1) * step.gpus_per_task]
                if len(chunk) < step.gpus_per_task:
                    raise ProbeError(
                        f"probe {step.probe} on {self.node}: rank {rank} needs {step.gpus_per_task} GPU(s); "
                        f"only {len(visible)} visible"
                    )
                env["CUDA_VISIBLE_DEVICES"] = ",".join(chunk)
            envs.append(env)
        return envs

    def command(self, step: Step) -> list[str]:
        argv = probe_argv(step.spec.module, step.args, self._python)
        return ["env", f"WORLD_SIZE={step.ranks}", f"RANK=<0..{step.ranks - 1}>", *argv]

    def run(self, step: Step) -> ProbeResult:
        envs = self._rank_envs(step)
        argv = probe_argv(step.spec.module, step.args, self._python)
        started = time.monotonic()
        finished = run_all([argv] * step.ranks, envs, step.timeout_s, watch=watch(step))
        codes = finished.returncodes
        bad = [(rank, code) for rank, code in enumerate(codes) if code not in (0, None)]
        if finished.first_bad is not None:  # the rank that died first, not the lowest-numbered casualty
            bad.sort(key=lambda pair: pair[0] != finished.first_bad)
        result = ProbeResult(
            probe=step.probe,
            command=[shlex.join(argv)],
            nodes=step.nodes,
            returncode=bad[0][1] if bad else (0 if all(c == 0 for c in codes) else -15),  # type: ignore[misc]
            stdout="".join(finished.stdout),
            stderr="".join(
                f"[rank {r}] {line}\n" for r, text in enumerate(finished.stderr) for line in text.splitlines()
            ),
            duration_s=time.monotonic() - started,
            ended_at=finished.ended_at,
            stop_reason=finished.stop_reason,
        )
        if finished.timed_out:
            reported = reported_ranks(result.stdout)
            missing = [rank for rank in range(step.ranks) if rank not in reported]
            timeout = ProbeTimeout(
                f"{timeout_text(result, self.node, step.timeout_s)}; ranks {missing} did not finish",
                nodes=step.nodes,
            )
            timeout.result = result  # type: ignore[attr-defined]  # what the ranks wrote: progress, finished phases
            raise timeout
        if bad:
            rank, _ = bad[0]
            result.stderr = (
                f"rank {rank} on {self.node} failed first\n{result.stderr}\nrank {rank} on {self.node} failed first\n"
            )
        return check_step(result, step.ranks)

    def close(self) -> None:
        return None
