"""Read nccl-tests' text output (``all_reduce_perf`` & co.) into rows, for the side-by-side comparison.

nccl-tests (``src/common.cu``, ``TimeTest``/``BenchTime``) prints one line per size::

    #       size     count   type  redop  root   time  algbw  busbw #wrong   time  algbw  busbw #wrong
       4294967296 1073741824 float    sum    -1  24893  172.54  345.07     0  24889  172.56  345.13     0

Older builds omit ``redop``/``root`` for some collectives and in-place alltoall prints ``N/A`` for
``#wrong``; so a row is recognised from its end: the out-of-place and in-place groups of four
(time, algbw, busbw, wrong) after two leading integers (size, count). Also read: ``# Avg bus
bandwidth``, ``# Out of bounds values``, the ``nccl-tests version`` / ``NCCL version`` header and
the ``#  Rank  0 Group  0 Pid ... on HOST device 0 [...] NAME`` device lines.
"""

from __future__ import annotations

import re
from typing import Any

from gpuaccept.contracts.nccl_payloads import NcclTestsRow

__all__ = ["parse_nccl_tests"]

_NUM = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
_VERSION = re.compile(r"nccl-tests version (\S+)")
_NCCL_LIB = re.compile(r"nccl-library=(\d+)|NCCL version (\S+)")
_DEVICE = re.compile(r"#\s+Rank\s+(\d+).*? on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s+(.+)$")


def _wrong(token: str) -> int | None:
    return None if token.upper() == "N/A" else int(float(token))


def _row(line: str) -> NcclTestsRow | None:
    tokens = line.split()
    if len(tokens) < 10 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    tail = tokens[-8:]
    numeric = [t for i, t in enumerate(tail) if i not in (3, 7)]
    if not all(_NUM.match(t) for t in numeric):
        return None
    if not all(_NUM.match(t) or t.upper() == "N/A" for t in (tail[3], tail[7])):
        return None
    return NcclTestsRow(
        size=int(tokens[0]),
        count=int(tokens[1]),
        oop_time_us=float(tail[0]),
        oop_algbw=float(tail[1]),
        oop_busbw=float(tail[2]),
        oop_wrong=_wrong(tail[3]),
        ip_time_us=float(tail[4]),
        ip_algbw=float(tail[5]),
        ip_busbw=float(tail[6]),
        ip_wrong=_wrong(tail[7]),
    )


def parse_nccl_tests(text: str) -> dict[str, Any]:
    """``{"rows": [...], "avg_busbw": ..., "out_of_bounds": ..., "version": ..., "devices": [...]}``."""
    rows: list[NcclTestsRow] = []
    out: dict[str, Any] = {"devices": []}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if m := _AVG.search(stripped):
                out["avg_busbw"] = float(m.group(1))
            elif m := _OOB.search(stripped):
                out["out_of_bounds"] = int(m.group(1))
            elif m := _DEVICE.search(stripped):
                out["devices"].append(
                    {
                        "rank": int(m.group(1)),
                        "host": m.group(2),
                        "device": int(m.group(3)),
                        "bus": m.group(4),
                        "name": m.group(5).strip(),
                    }
                )
            if m := _VERSION.search(stripped):
                out["version"] = m.group(1)
            if m := _NCCL_LIB.search(stripped):
                out["nccl"] = m.group(1) or m.group(2)
            continue
        row = _row(stripped)
        if row is not None:
            rows.append(row)
    out["rows"] = rows
    return out
