"""Selftest-only pytest plugin (``-p tests.selftest.chaos_plugin``) for the chaos matrix: breaks the loopback
cluster at one moment of one test of an inner acceptance run.

``GPUACCEPT_CHAOS=<kind>:<test>:<node>`` (what it did goes to ``GPUACCEPT_CHAOS_LOG``): ``kill-before``
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
KIND, TARGET, NODE = [*os.environ.get("GPUACCEPT_CHAOS", "").split(":"), "", "", ""][:3]
_state: dict[str, Any] = {"test": "", "steps": 0, "done": not KIND}


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


def _targeted() -> bool:
    return not _state["done"] and TARGET in _state["test"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _state["test"], _state["steps"] = item.nodeid, 0
    if KIND == "kill-before" and _targeted():
        _state["done"] = True
        _script("kill-node.sh", NODE)


_launch = slurm.SlurmLauncher._launch


def _chaos_launch(self: Any, step: Step, argv: list[str]) -> Any:
    targeted = _targeted()
    if targeted and KIND == "ctld-restart":
        _state["done"] = True
        _script("restart-ctld.sh")
    elif targeted and KIND == "kill-during":
        _state["done"] = True
        _state["timer"] = threading.Timer(0.5, _script, ("kill-node.sh", NODE))
        _state["timer"].start()
    elif targeted and KIND == "scancel":
        _state["done"] = True
        threading.Thread(target=_scancel, args=(self, step), daemon=True).start()
    result = _launch(self, step, argv)
    if targeted and KIND == "kill-during":
        _state["timer"].join()  # a step shorter than half a second: killed as it ends, before the next one
    if targeted and KIND == "kill-between":
        _state["done"] = True
        _script("kill-node.sh", NODE)
    return result


slurm.SlurmLauncher._launch = _chaos_launch  # type: ignore[method-assign]
