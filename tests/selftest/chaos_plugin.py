"""Selftest-only pytest plugin (``-p tests.selftest.chaos_plugin``) for the chaos matrix: breaks the loopback
cluster at one moment of one test of an inner acceptance run.

``GPUACCEPT_CHAOS=<kind>:<test>:<node>`` (what it did goes to ``GPUACCEPT_CHAOS_LOG``; several, each once, joined
by ``;``: faults that lose no node can share one run): ``kill-before``
kills the node's slurmd as the test starts, ``kill-during`` half a second into the test's first srun
step, ``kill-between`` right after that step (before the test's next one, or the next test's);
``scancel`` cancels the test's first step while it runs; ``ctld-restart`` restarts slurmctld with its
state kept just before the test's first step.
It wraps the Slurm launcher's one launch function, so every step of the real tests goes through it.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.dispatch import slurm
from gpuaccept.dispatch.step import Step

DEV = Path(__file__).resolve().parents[2] / "slurm" / "dev-cluster"


class _Spec:
    """One fault: its kind, the test (a substring of its node id) and node it hits, and whether it fired."""

    def __init__(self, text: str) -> None:
        self.kind, self.target, self.node = [*text.split(":"), "", "", ""][:3]
        self.done = False
        self.timer: threading.Timer | None = None

    def targeted(self) -> bool:
        return not self.done and self.target in _state["test"]


SPECS = [_Spec(text) for text in os.environ.get("GPUACCEPT_CHAOS", "").split(";") if text]
_state: dict[str, Any] = {"test": ""}


def _script(name: str, *args: str) -> None:
    done = subprocess.run(["bash", str(DEV / name), *args], capture_output=True, text=True, timeout=60)
    _say(f"{name} {' '.join(args)}: exit {done.returncode} {done.stderr.strip()}")


def _say(line: str) -> None:
    """Into ``GPUACCEPT_CHAOS_LOG`` (past pytest's capture, whatever test ran): what the selftest reads."""
    with open(os.environ["GPUACCEPT_CHAOS_LOG"], "a") as log:
        log.write(f"[chaos] {line}\n")


def _scancel(launcher: Any, step: Step) -> None:
    """Cancel the step named ``step.name`` once squeue lists it."""
    job = launcher.allocation.job_id
    for _ in range(100):
        rows = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i|%j"], capture_output=True, text=True)
        ids = [row.split("|")[0] for row in rows.stdout.splitlines() if row.endswith("|" + step.name)]
        if ids:
            subprocess.run(["scancel", *ids], check=False)
            _say(f"scancel {' '.join(ids)} ({step.probe}): exit 0")
            return
        time.sleep(0.05)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _state["test"] = item.nodeid
    for spec in SPECS:
        if spec.kind == "kill-before" and spec.targeted():
            spec.done = True
            _script("kill-node.sh", spec.node)


_launch = slurm.SlurmLauncher._launch


def _chaos_launch(self: Any, step: Step, argv: list[str]) -> Any:
    targeted = [spec for spec in SPECS if spec.targeted()]
    for spec in targeted:
        if spec.kind == "ctld-restart":
            spec.done = True
            _script("restart-ctld.sh")
        elif spec.kind == "kill-during":
            spec.done = True
            spec.timer = threading.Timer(0.5, _script, ("kill-node.sh", spec.node))
            spec.timer.start()
        elif spec.kind == "scancel":
            spec.done = True
            threading.Thread(target=_scancel, args=(self, step), daemon=True).start()
    result = _launch(self, step, argv)
    for spec in targeted:
        if spec.timer is not None:
            spec.timer.join()  # a step shorter than half a second: killed as it ends, before the next one
        if spec.kind == "kill-between":
            spec.done = True
            _script("kill-node.sh", spec.node)
    return result


slurm.SlurmLauncher._launch = _chaos_launch  # type: ignore[method-assign]
