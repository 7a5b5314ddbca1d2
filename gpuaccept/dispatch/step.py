"""The launcher-independent description of one probe step, and the Launcher protocol.

Tests say *what* to run (probe, nodes, tasks per node, GPUs per task); a launcher decides *how*
(``srun`` inside the session's allocation, or local subprocesses). Both return the same
``ProbeResult`` so tests never know which one ran them.
"""

from __future__ import annotations

import shlex
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpuaccept.dispatch.result import ProbeResult
from gpuaccept.probes.specs import ProbeSpec
from gpuaccept.training.watch import standing

__all__ = ["PERNODE", "TASKS", "Launcher", "Step", "probe_argv", "step_limits", "watch"]

#: Variables every multi-GPU step needs on single-host test machines and on NVLS-less fabrics alike;
#: a site can override them by exporting its own values before pytest.
STEP_ENV_DEFAULTS: dict[str, str] = {"PYTHONUNBUFFERED": "1"}


#: the launch wrappers a step's module may run under: a fan-out step's per-node view (``probes/_pernode``), and
#: a container task that starts its node's ranks itself (``probes/_tasks``); each takes the module it runs
PERNODE = "gpuaccept.probes._pernode"
TASKS = "gpuaccept.probes._tasks"


def probe_argv(module: str, args: tuple[str, ...] = (), python: str | None = None) -> list[str]:
    """``python -m <module> args...`` (a spec's module, or a wrapper of it) with the interpreter running pytest."""
    return [python or sys.executable, "-m", module, *args]


@dataclass(frozen=True)
class Step:
    """One launch of a probe's spec on a set of nodes: the node runs ``spec.module``."""

    spec: ProbeSpec[Any]
    nodes: tuple[str, ...]
    tasks_per_node: int = 1
    gpus_per_task: int = 0
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    #: seconds before the step is cancelled; 0: the probe's declared limit (``gpuaccept.probes.specs``)
    timeout_s: float = 0.0
    exclusive: bool = False
    name: str = field(default_factory=lambda: "gpuaccept-" + uuid.uuid4().hex[:10])
    #: how ``timeout_s`` follows from the step's plan (``gpuaccept.timelimits.TimeLimit.basis``)
    limit_basis: str = ""
    #: each phase's end for a GPU at the floor, from the step's start (``TimeLimit.phases``): with them the
    #: launcher watches the ranks' progress and stops the step once one is proven behind (``watch``)
    phases: tuple[tuple[str, float], ...] = ()
    #: seconds without a progress line from any rank before a step with phases is stopped as hung
    hang_s: float = 180.0

    def __post_init__(self) -> None:
        if not self.timeout_s:
            limit = self.spec.limit(self.args, self.gpus_per_task)
            object.__setattr__(self, "timeout_s", limit.seconds)
            object.__setattr__(self, "limit_basis", self.limit_basis or limit.basis)

    @property
    def probe(self) -> str:
        """The probe's name, as records and messages give it."""
        return self.spec.name

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


def step_limits(step: Step, result: ProbeResult | None) -> dict[str, object]:
    """What the run record keeps of a step's time: its limit and why, its wall, and the share of the limit it
    used (a healthy step keeps within two thirds of it; one cancelled at its limit shows about 1)."""
    wall = result.duration_s if result is not None else None
    return {
        "probe": step.probe,
        "nodes": list(step.nodes),
        "limit_s": step.timeout_s,
        "basis": step.limit_basis,
        "wall_s": None if wall is None else round(wall, 3),
        "ratio": None if wall is None else round(wall / step.timeout_s, 3),
    }


def watch(step: Step) -> Callable[[str, float], str] | None:
    """For a step with phases: what the launcher asks every few seconds while it runs. It stops the step
    once a rank has not finished a phase whose end at the floor has passed, or no rank has made progress
    for ``step.hang_s`` (the reason names the ranks); None for a step without phases."""
    if not step.phases:
        return None
    started = time.time()

    def look(output: str, elapsed: float) -> str:
        return standing(output, step.phases, started, started + elapsed, step.hang_s).reason

    return look
