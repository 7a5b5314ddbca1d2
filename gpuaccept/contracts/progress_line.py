"""Where a rank stands while a long probe runs: the progress line a rank streams and the dispatcher reads.

A fine-tune launch takes minutes; when its time limit comes, the suite must know where each GPU stood,
so that a timeout is a measurement and not a loss. Every rank
prints one short line per step and one at the start of each phase::

    GPUACCEPT_PROGRESS {"node": "node1", "rank": 2, "gpu": 2, "phase": "solo", "step": 41, "steps": 100, "t": 1764...}

``t`` is the wall clock (``time.time()``) when the rank wrote it: the login node compares it with the
moment the step was stopped, and the rank's own start of the phase, to bound how fast the rank can have
been. The line is short (well under srun's ~1 KiB cut), so it never travels in parts; a line that does not
parse is ignored, since progress only ever informs a verdict that the limit already forced.

Written by the node side (``gpuaccept.training.loop`` through ``gpuaccept.training.progress_reporter``), read by
the judges (``gpuaccept.verdicts.launch_time``): it lives here, below both.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

__all__ = ["PROGRESS_SENTINEL", "Progress", "format_progress", "read_progress"]

PROGRESS_SENTINEL = "GPUACCEPT_PROGRESS "


@dataclass(frozen=True)
class Progress:
    """One rank's position: the phase it is in, the step it has finished (0 at the phase's start), when."""

    node: str
    rank: int
    phase: str
    step: int
    steps: int
    t: float
    #: the GPU's NVML index when the rank has one (how a failure names the board)
    gpu: int | None = None


def format_progress(progress: Progress) -> str:
    """The line a rank prints (without the newline)."""
    return PROGRESS_SENTINEL + json.dumps(asdict(progress), separators=(",", ":"))


def read_progress(stdout: str) -> list[Progress]:
    """Every well-formed progress line of ``stdout``, in the order written (a launcher's label before the
    sentinel is allowed; a broken line is skipped)."""
    out: list[Progress] = []
    marker = PROGRESS_SENTINEL.strip()
    for line in stdout.splitlines():
        if marker not in line:
            continue
        try:
            raw = json.loads(line.split(marker, 1)[1])
            gpu = raw.get("gpu")
            out.append(
                Progress(
                    str(raw["node"]),
                    int(raw["rank"]),
                    str(raw["phase"]),
                    int(raw["step"]),
                    int(raw["steps"]),
                    float(raw["t"]),
                    None if gpu is None else int(gpu),
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out
