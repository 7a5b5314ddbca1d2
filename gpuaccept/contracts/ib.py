"""InfiniBand sysfs spellings (``/sys/class/infiniband/<hca>/ports/<n>/``): a port's ``state``
(``4: ACTIVE``), ``phys_state`` (``5: LinkUp``) and ``rate`` (``400 Gb/sec (4X NDR)``), read the same way by
the IB judge (``gpuaccept.verdicts.infiniband``) and the fabric's GPU -> HCA affinity (``gpuaccept.fabric.affinity``).
"""

from __future__ import annotations

import re

__all__ = ["parse_rate", "parse_state"]

_RATE = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*Gb/sec")


def parse_state(raw: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``; ``5: LinkUp`` -> ``LinkUp``; None stays None."""
    if raw is None:
        return None
    return raw.split(":", 1)[1].strip() if ":" in raw else raw.strip()


def parse_rate(raw: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0; ``2.5 Gb/sec (1X SDR)`` -> 2.5; unparsable -> None."""
    match = _RATE.match(raw or "")
    return float(match.group("n")) if match else None
