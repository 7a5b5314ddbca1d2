"""The limits a site file loosens against the packaged ones: an easy path to ACCEPTED, so the run
record and the summary name every one (metric, SKU, bound, packaged value, site value, file).

Looser means: a ``min`` lowered or dropped, a ``max`` raised or dropped, an ``equal`` changed or
dropped, a ``straggler_pct`` or ``regression_pct`` widened (on a limit, or in ``settings`` for every
SKU). A tighter limit, or a limit for a SKU or metric the packaged file does not have, loosens nothing
and is not listed.
"""

from __future__ import annotations

from typing import Any

from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.schema import Limit

__all__ = ["loosened"]


def _looser(bound: str, packaged: Any, site: Any) -> bool:
    if packaged is None or packaged == site:
        return False
    if site is None or bound == "equal":
        return True
    return bool(site < packaged) if bound == "min" else bool(site > packaged)


def _bounds(old: Limit, new: Limit) -> list[tuple[str, Any, Any]]:
    pairs = [(name, getattr(old, name), getattr(new, name)) for name in ("min", "max", "equal")]
    pairs += [(name, getattr(old, name), getattr(new, name)) for name in ("straggler_pct", "regression_pct")]
    return [(name, was, now) for name, was, now in pairs if _looser(name, was, now)]


def loosened(merged: Thresholds, packaged: Thresholds) -> list[dict[str, Any]]:
    """Every limit of ``merged`` (packaged + site) looser than ``packaged``'s for the same SKU and metric."""
    site = str(merged.files[-1]) if len(merged.files) > 1 else ""
    found = [
        {"metric": f"settings.{name}", "sku": "every SKU", "bound": "value", "packaged": was, "site": now, "file": site}
        for name, was in sorted(packaged.settings.items())
        if (now := merged.settings.get(name, was)) > was  # a wider straggler or regression tolerance
    ]
    for sku in sorted(set(merged.skus) & set(packaged.skus)):
        before = packaged.limits_for(sku)
        for metric, limit in sorted(merged.limits_for(sku).items()):
            old = before.get(metric)
            if old is None:
                continue
            for bound, was, now in _bounds(old, limit):
                found.append({"metric": metric, "sku": sku, "bound": bound, "packaged": was, "site": now, "file": site})
    return found
