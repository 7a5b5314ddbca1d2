"""One judged check: a measured value or a named expectation, with its limit, source and verdict.

It is the unit of the run record, the report and the terminal summary. Verdicts:

* ``pass`` / ``fail``: judged against a limit from thresholds.yaml (or, for an expectation, against
  the value its test expected), with the limit's ``source``;
* ``info``: a figure the catalogue declares informational (shown, never passes a test);
* ``unjudged``: the test needed a limit the node's SKU does not define; the test is an ERROR;
* ``measured``: the same, in a calibration run (``--calibrate``): recorded for ``gpuaccept-calibrate``
  to set a floor from, never a pass; the test ends ``measured``, not passed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["JUDGED", "MetricResult", "Verdict"]

Verdict = Literal["pass", "fail", "info", "unjudged", "measured"]
#: The verdicts a test may pass on (at least one ``pass``, no ``fail``).
JUDGED = frozenset({"pass", "fail"})


@dataclass
class MetricResult:
    """A measurement on a node (and GPU or other component), judged against what its SKU expects."""

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
    verdict: Verdict = "info"
    reason: str = ""
    kind: Literal["metric", "expectation"] = "metric"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """``node GPU 3 (bus)``, or another component named by the test (``HCA mlx5_2 port 1``)."""
        kind = self.extra.get("component", "GPU")
        return f"{self.node}" + (f" {kind} {self.gpu}" if self.gpu is not None else "")

    @property
    def on_gpu(self) -> bool:
        """The check is about one GPU (not a GPU pair, an HCA, a task or a fingerprint field)."""
        return self.gpu is not None and "->" not in self.gpu and self.extra.get("component", "GPU") == "GPU"

    @property
    def judged(self) -> bool:
        return self.verdict in JUDGED

    def limit_text(self) -> str:
        """What was expected, as an operator reads it: ``>= 600``, ``== match``, ``no limit``."""
        parts = []
        if self.min is not None:
            parts.append(f">= {self.min:g}")
        if self.max is not None:
            parts.append(f"<= {self.max:g}")
        if self.equal is not None:
            parts.append(f"== {self.equal}")
        if parts:
            return " and ".join(parts)
        return {"info": "informational", "measured": "no limit yet (calibration)"}.get(self.verdict, "no limit")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check_entry(self) -> dict[str, Any]:
        """The compact line a test's run-record entry lists for each check it judged."""
        return {
            "check": self.metric,
            "kind": self.kind,
            "where": self.where,
            "observed": self.value,
            "expected": self.limit_text(),
            "unit": self.unit,
            "verdict": self.verdict,
            "source": self.source,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MetricResult:
        """From a run record's JSON (records before the ``kind`` field, or with ``reported``, read as info)."""
        data = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        if data.get("verdict") == "reported":
            data["verdict"] = "info"
        return cls(**data)
