"""The launcher-independent description of one probe step, and the Launcher protocol.

Tests say *what* to run (probe, nodes, tasks per node, GPUs per task); a launcher decides *how*
(``srun`` inside the session's allocation, or local subprocesses). Both return the same
``ProbeResult`` so tests never know which one ran them.
"""

from __future__ import annotations

import shlex
import sys
import uuid
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gpuaccept.dispatch.result import ProbeResult

__all__ = ["Launcher", "Step", "probe_argv"]

#: Variables every multi-GPU step needs on the lent machines and on NVLS-less fabrics alike;
#: a site can override them by exporting its own values before pytest.
STEP_ENV_DEFAULTS: dict[str, str] = {"PYTHONUNBUFFERED": "1"}


def probe_argv(probe: str, args: tuple[str, ...] = (), python: str | None = None) -> list[str]:
    """``python -m gpuaccept.probes.<probe> args...`` with the interpreter running pytest."""
    return [python or sys.executable, "-m", f"gpuaccept.probes.{probe}", *args]


@dataclass(frozen=True)
class Step:
    """One probe launch on a set of nodes."""

    probe: str
    nodes: tuple[str, ...]
    tasks_per_node: int = 1
    gpus_per_task: int = 0
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 300.0
    exclusive: bool = False
    name: str = field(default_factory=lambda: "gpuaccept-" + uuid.uuid4().hex[:10])

    @property
    def ranks(self) -> int:
        return self.tasks_per_node * len(self.nodes)


@runtime_checkable
class Launcher(Protocol):
    """What the ``cluster`` fixture needs from a way of running probes."""

    name: str

    def nodes(self) -> list[str]:
        """The nodes under test, in a stable order."""

    def declared_gpus(self, node: str) -> int:
        """GPUs the node declares (Slurm gres, ``--gpus-per-node`` or NVML locally); 0 if none."""

    def command(self, step: Step) -> list[str]:
        """The exact command that runs ``step`` (what a dry run prints)."""

    def run(self, step: Step) -> ProbeResult:
        """Run ``step`` to completion or timeout; raises ``ProbeError`` on failure."""

    def close(self) -> None:
        """Release what the launcher holds (the allocation); safe to call twice."""


def shell_join(argv: list[str]) -> str:
    """Quote for a shell, leaving a dry run's ``$SLURM_JOB_ID`` expandable inside an allocation."""
    return " ".join(
        arg.replace("$SLURM_JOB_ID", '"$SLURM_JOB_ID"')
        if "$SLURM_JOB_ID" in arg and "'" not in arg
        else shlex.quote(arg)
        for arg in argv
    )
