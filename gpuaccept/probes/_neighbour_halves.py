"""How the neighbours probe's two halves keep in step (``gpuaccept/probes/neighbours.py``): the halves, the
phases each half goes through, the file barrier they meet at, and how long anything may wait.

Each half is a process of its own with its own CUDA contexts; both run every phase of ``PHASES`` in turn and
meet at barriers, a file per half in a folder they share (they share no CUDA context and need no network). A
phase ends when both halves have reached its ``done`` barrier, so a half never measures while the other
measures alone; the half that does not measure waits there idle. Nothing here touches a GPU: ``run_half``
takes the measuring as a function, so the schedule is tested on a CPU (``tests/selftest/``).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuaccept.contracts.neighbours import FIGURES

__all__ = ["HALVES", "PHASES", "HalfGone", "Measure", "barrier", "phase_limit", "run_half", "run_limit", "split"]

#: longest wait at a barrier for the other half (its torch import and CUDA start, a figure's buffers and warm-up)
BARRIER_S = 60.0
#: a child's start-up budget (torch import, CUDA context on its GPUs)
START_S = 60.0
#: the halves, and the phases in order: each phase's name (its barrier folder), what it measures (the
#: record's ``solo`` or ``together``) and the halves that measure in it; the others wait idle until it is done
HALVES = ("A", "B")
PHASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("solo-A", "solo", ("A",)),
    ("solo-B", "solo", ("B",)),
    ("together", "together", ("A", "B")),
)
#: how often an idle half looks for the measuring half at the phase's end (it must not load the host)
IDLE_POLL_S = 0.05

#: one figure on a half's GPUs: ``measure(figure, ready)`` warms up, calls ``ready`` (the barrier) and returns
#: each GPU's figure, the batches timed and the window's seconds
Measure = Callable[[str, Callable[[], None]], tuple[list[float], int, float]]


class HalfGone(RuntimeError):
    """The other half failed (its ``failed.<half>`` file is there): this half stops at its barrier."""


def phase_limit(seconds: float) -> float:
    """The longest one phase may take in a half that measures: each figure's window plus its warm-up (at most
    1 s) and buffers (4 s allowed). A half idle in that phase waits this plus ``BARRIER_S`` for the other."""
    return len(FIGURES) * (seconds + 5)


def run_limit(seconds: float) -> float:
    """The longest both children may run, after which a half still running is killed: start-up, the longest
    wait for the other half's, and the phases one after another. ``probes/specs.py`` allows this plus the
    parent's start-up."""
    return START_S + BARRIER_S + len(PHASES) * phase_limit(seconds)


def split(devices: Sequence[str]) -> dict[str, list[str]]:
    """Two disjoint halves: A the first ``len // 2`` GPUs, B the rest (B holds the odd one)."""
    cut = len(devices) // 2
    return {"A": list(devices[:cut]), "B": list(devices[cut:])}


def barrier(
    folder: Path,
    name: str,
    me: str,
    parties: int,
    timeout_s: float = BARRIER_S,
    failed: Path | None = None,
    poll_s: float = 0.005,
) -> None:
    """Wait until ``parties`` children have reached barrier ``name``: each writes ``<name>.<me>`` in ``folder``
    (the halves share no CUDA context and need no network), then polls for the others'. A half that never
    arrives (crashed, hung) is named after ``timeout_s``; one that failed and said so (``failed.<half>`` in
    ``failed``) at once (``HalfGone``), so no half waits out the timeout for a dead one."""
    (folder / f"{name}.{me}").write_text(str(os.getpid()))
    deadline = time.monotonic() + timeout_s
    while True:
        gone = sorted(failed.glob("failed.*")) if failed is not None else []
        for path in gone:
            if path.suffix.lstrip(".") != me:
                raise HalfGone(f"barrier {name}: half {path.suffix.lstrip('.')} failed: {path.read_text()}")
        if len(list(folder.glob(f"{name}.*"))) >= parties:
            return
        if time.monotonic() > deadline:
            here = sorted(p.suffix.lstrip(".") for p in folder.glob(f"{name}.*"))
            raise TimeoutError(f"barrier {name}: {parties} halves expected within {timeout_s:g} s, arrived: {here}")
        time.sleep(poll_s)


def run_half(
    half: str, folder: Path, seconds: float, measure: Measure, busy: Callable[[], list[dict[str, Any]]]
) -> dict[str, dict[str, Any]]:
    """One half's part of every phase, in step with the other half through the barriers in ``folder``: measure
    each figure where the phase has this half measure, else wait idle until the measuring half is done. Called
    once this half's CUDA contexts are open; returns ``{"solo"|"together": {busy, figures, windows}}``."""
    barrier(folder, "start", half, len(HALVES), BARRIER_S, failed=folder)
    taken: dict[str, dict[str, Any]] = {}
    for phase, kind, measuring in PHASES:
        where = folder / phase
        where.mkdir(exist_ok=True)
        if half not in measuring:
            print(f"neighbours half {half}: {phase}, idle", file=sys.stderr, flush=True)
            wait = BARRIER_S + phase_limit(seconds)
            barrier(where, "done", half, len(HALVES), wait, failed=folder, poll_s=IDLE_POLL_S)
            continue
        print(f"neighbours half {half}: {phase}, measuring", file=sys.stderr, flush=True)
        found = busy()
        figures: dict[str, list[float]] = {}
        windows: dict[str, dict[str, float]] = {}
        for figure in FIGURES:
            ready = functools.partial(barrier, where, figure, half, len(measuring), BARRIER_S, folder)
            figures[figure], batches, length = measure(figure, ready)
            windows[figure] = {"batches": batches, "seconds": length}
        taken[kind] = {"busy": found, "figures": figures, "windows": windows}
        barrier(where, "done", half, len(HALVES), BARRIER_S, failed=folder)
    return taken
