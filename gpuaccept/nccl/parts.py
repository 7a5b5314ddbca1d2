"""Carry a large per-rank payload through srun's output in short lines, and put it back together.

srun forwards task output in messages of about 1 KiB; a longer line from one task can be cut and
interleaved with another task's output (seen on Slurm 22.05: a 4.7 KB result line broken at byte 1007
by another rank's line). The sweep's per-rank payload is several KB, so the probe writes it as numbered
lines ``GPUACCEPT_NCCL_PART <rank> <i> <n> <chunk>`` of at most ~900 bytes, each written and flushed
on its own (short writes reach the pipe whole), and keeps its sentinel line short. ``read_parts``
reassembles per rank and says which rank's parts are missing or damaged.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

__all__ = ["PART", "PartsError", "read_parts", "write_parts"]

PART = "GPUACCEPT_NCCL_PART"
CHUNK = 800


class PartsError(ValueError):
    """A rank's payload is incomplete or does not parse."""


def write_parts(rank: int, payload: dict[str, Any], stream: TextIO | None = None, chunk: int = CHUNK) -> int:
    """Write ``payload`` as JSON in numbered chunks; return the number of lines."""
    out = stream or sys.stdout
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    pieces = [text[i : i + chunk] for i in range(0, len(text), chunk)] or [""]
    for index, piece in enumerate(pieces):
        out.write(f"{PART} {rank} {index} {len(pieces)} {piece}\n")
        out.flush()
    return len(pieces)


def read_parts(stdout: str) -> dict[int, dict[str, Any]]:
    """``{rank: payload}`` from every complete set of parts in ``stdout``."""
    chunks: dict[int, dict[int, str]] = {}
    totals: dict[int, int] = {}
    for line in stdout.splitlines():
        at = line.find(PART + " ")
        if at < 0:
            continue
        fields = line[at + len(PART) + 1 :].split(" ", 3)
        if len(fields) < 3:
            continue
        try:
            rank, index, total = int(fields[0]), int(fields[1]), int(fields[2])
        except ValueError:
            continue
        chunks.setdefault(rank, {})[index] = fields[3] if len(fields) > 3 else ""
        totals[rank] = total
    out: dict[int, dict[str, Any]] = {}
    for rank, pieces in chunks.items():
        missing = sorted(set(range(totals[rank])) - set(pieces))
        if missing:
            raise PartsError(f"rank {rank}: payload parts {missing} of {totals[rank]} never arrived")
        try:
            out[rank] = json.loads("".join(pieces[i] for i in range(totals[rank])))
        except ValueError as exc:
            raise PartsError(f"rank {rank}: payload does not parse ({exc})") from None
    return out
