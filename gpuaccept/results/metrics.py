"""One measured value with its limit and verdict: the unit of the run record and the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["MetricResult", "Verdict"]

Verdict = Literal["pass", "fail", "reported"]


@dataclass
class MetricResult:
    """A measurement on a node (and GPU), judged against the limit in force for its SKU."""

    test: str
    metric: str
    value: float | str | None
    unit: str
    node: str
    sku: str
    gpu: str | None = None
    min: float | None = None
    max: float | None = None
    equal: float | str | None = None
    source: str | None = None
    verdict: Verdict = "reported"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """``node GPU 3 (bus)``, or another component named by the test (``HCA mlx5_2 port 1``)."""
        kind = self.extra.get("component", "GPU")
        return f"{self.node}" + (f" {kind} {self.gpu}" if self.gpu is not None else "")

    def limit_text(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        if self.equal is not None:
            parts.append(f"== {self.equal}")
        return " and ".join(parts) or "no limit"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
