"""Decode floors for a SKU the suite was never measured on, from the two it was.

A decode step at a fixed batch reads the same bytes B on every SKU. Its time is a fixed cost plus the bytes
at a share k of the SKU's datasheet HBM bandwidth: ``t = c + B / (k x BW)``. Measured MBU is
``B / (t x BW)``, so with ``x = 1 / BW``: ``x / MBU = c / B + x / k``, a line in x through the measured SKUs
(B cancels). The fixed cost (kernel launches, the greedy pick, the host's per-token work) does not shrink
with faster memory, which is why a faster-HBM part reaches a *smaller* share of its bandwidth: on the H100
(3.35 TB/s) the suite decodes at 48.6% MBU, on the H200 (4.8 TB/s) at 40.8%. A floor that assumed the same
share on every SKU (the suite's rule before this one) would fail a healthy B200 (8 TB/s, predicted 30%).

Two measured SKUs fix the line's two parameters exactly, so the fit cannot be checked against a third; the
floor of an unmeasured SKU is therefore ``UNMEASURED_SHARE`` of the prediction (wider than the 0.85 kept
under a SKU's own measurements), and its check says it was predicted, not measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["UNMEASURED_SHARE", "DecodeFit", "unmeasured_floor"]

#: an unmeasured SKU's floor as a share of the predicted figure (a measured SKU's floor: 0.85 x its lowest)
UNMEASURED_SHARE = 0.7


@dataclass(frozen=True)
class DecodeFit:
    """``x / MBU = fixed + x * inv_share`` with ``x = 1 / (HBM TB/s)`` (MBU as a fraction)."""

    fixed: float
    inv_share: float

    @classmethod
    def through(cls, a: tuple[float, float], b: tuple[float, float]) -> DecodeFit:
        """The line through two measured SKUs, each ``(datasheet HBM TB/s, measured MBU %)``."""
        (bw_a, mbu_a), (bw_b, mbu_b) = a, b
        if bw_a == bw_b:
            raise ValueError("two SKUs of the same HBM bandwidth fix no line")
        xa, xb = 1 / bw_a, 1 / bw_b
        ya, yb = xa / (mbu_a / 100), xb / (mbu_b / 100)
        inv_share = (ya - yb) / (xa - xb)
        return cls(fixed=ya - xa * inv_share, inv_share=inv_share)

    @property
    def share(self) -> float:
        """The share of the datasheet bandwidth the bytes stream at, once the fixed cost is taken out."""
        return 1 / self.inv_share

    @property
    def plausible(self) -> bool:
        """A cost that cannot be negative and a share of the bandwidth no part exceeds."""
        return self.fixed >= 0 and 0 < self.share <= 1

    def mbu_pct(self, hbm_tbps: float) -> float:
        x = 1 / hbm_tbps
        return 100 * x / (self.fixed + x * self.inv_share)


def unmeasured_floor(predicted_pct: float) -> float:
    """``UNMEASURED_SHARE`` of a predicted figure, rounded down to half a point (the yaml's precision)."""
    return math.floor(UNMEASURED_SHARE * predicted_pct * 2) / 2
