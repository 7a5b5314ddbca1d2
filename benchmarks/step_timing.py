"""A pytest plugin for the benchmarks: one JSON line per probe step, to tell Slurm's time from the tests'.

    PYTHONPATH=benchmarks GPUACCEPT_STEP_LOG=/tmp/steps.jsonl pytest -p step_timing -m acceptance ...

Each line: the test, the probe, its nodes, the step's wall seconds (the srun command from start to exit,
``ProbeResult.duration_s``), when it ended (``time.time()``), the xdist worker, and whether it was a
``run_shared`` repeat or another node's slice of a fan-out step (same result or step seen before: no new
srun). Under xdist every worker appends to
the same file; a line is one ``write`` well under the pipe-atomic size. ``benchmarks/fleet_bench.py``
reads it to split each test's time into its steps and the rest (fingerprint lookups are steps too).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

_SEEN: set[object] = set()


def pytest_gpuaccept_step_finished(item: Any, step: Any, command: list[str], result: Any) -> None:
    path = os.environ.get("GPUACCEPT_STEP_LOG")
    if not path:
        return
    # a run_shared repeat hands the same result again; a fan-out step's slices share one Step (one srun)
    repeat = (result is not None and id(result) in _SEEN) or step.name in _SEEN
    _SEEN.add(step.name)
    if result is not None:
        _SEEN.add(id(result))
    line = {
        "test": getattr(item, "nodeid", None),
        "probe": step.probe,
        "nodes": list(step.nodes),
        "step_s": None if result is None else round(result.duration_s, 4),
        "ok": result is not None,
        "repeat": repeat,
        "end": round(time.time(), 4),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")
