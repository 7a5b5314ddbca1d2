"""How far a node's wall clock is off, bounded from one probe step and the login host's own clock.

The node reads its clock (``clock_unix_s``) once inside a step that the login host brackets with its
clock: read at ``before`` and ``after``. If both clocks agree, the node's reading lies in that window;
the distance from the reading to the window is a lower bound on the offset that step start-up time
cannot inflate, so a slow ``srun`` never makes a healthy node look skewed (no false failure), and a
node off by more than the window's width is always seen.
"""

from __future__ import annotations

__all__ = ["offset_lower_bound_s"]


def offset_lower_bound_s(node_clock: float, before: float, after: float) -> float:
    """The least the node's clock can be off: 0 inside ``[before, after]``, else the distance to it."""
    if node_clock < before:
        return round(before - node_clock, 3)
    if node_clock > after:
        return round(node_clock - after, 3)
    return 0.0
