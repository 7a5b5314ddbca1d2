"""Byte sizes as people and nccl-tests write them: the one parser for options, probes and sweeps.

No imports beyond the standard library, so a probe can use it and stay runnable on its own.
"""

from __future__ import annotations

__all__ = ["parse_bytes"]

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_bytes(text: str) -> int:
    """``1048576``, ``512K``, ``1M``, ``8G``, ``8GiB``, ``1.5G``: binary units, as nccl-tests' ``-b/-e`` read
    them. A size that is not a positive number of bytes is a ValueError naming it."""
    stripped = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = _UNITS.get(stripped[-1:], 1)
    number = stripped[:-1] if stripped[-1:] in _UNITS else stripped
    try:
        value = int(float(number) * unit)
    except ValueError:
        raise ValueError(f"{text!r} is not a size such as 1048576, 512K, 1M or 8G") from None
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive size such as 1M or 8G")
    return value
