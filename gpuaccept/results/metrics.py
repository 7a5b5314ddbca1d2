"""One judged check: a measured value or a named expectation, with its limit, source and verdict.

It is the unit of the run record, the report and the terminal summary. Verdicts:

* ``pass`` / ``fail``: judged against a limit from thresholds.yaml (or, for an expectation, against
  the value its test expected), with the limit's ``source``;
* ``info``: a figure the catalogue declares informational (shown, never passes a test);
* ``unjudged``: the test needed a limit the node's SKU does not define; the test is an ERROR;
* ``unmeasured``: a reading that could not be taken, or a GPU other processes were using while it was
  measured (``gpu_idle``); the test is an ERROR unless a check failed;
* ``measured``: the same, in a calibration run (``--calibrate``): recorded for ``gpuaccept-calibrate``
  to set a floor from, never a pass; the test ends ``measured``, not passed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["JUDGED", "SUBJECT_KINDS", "MetricResult", "SubjectKind", "Verdict", "bounds_text", "number", "subject_of"]

Verdict = Literal["pass", "fail", "info", "unjudged", "unmeasured", "measured"]
#: What a check is about, beside its node: the node itself, one GPU (``3 (0000:9A:00.0)``), a GPU pair
#: (``0->1``, or a GPU and the HCA it pairs with), an HCA port (``mlx5_0 port 1``), a rail (the same HCA
#: index across nodes), a task or rank, a fingerprint field (``driver``), a Slurm partition. The kind
#: travels with the label so no reader has to guess it from the label's shape.
SubjectKind = Literal["node", "gpu", "pair", "hca", "rail", "rank", "field", "partition", "fspath"]
SUBJECT_KINDS: tuple[SubjectKind, ...] = ("node", "gpu", "pair", "hca", "rail", "rank", "field", "partition", "fspath")
#: how ``where`` names each kind (the words the suite's messages have always used; ``fspath``: a declared
#: filesystem's path, as the storage checks name it)
_SHOWN = {
    "gpu": "GPU",
    "pair": "GPU",
    "hca": "HCA",
    "rank": "rank",
    "field": "field",
    "partition": "partition",
    "fspath": "path",
}
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
    subject: str | None = None
    subject_kind: SubjectKind = "node"
    min: float | None = None
    max: float | None = None
    equal: float | str | None = None
    source: str | None = None
    verdict: Verdict = "info"
    reason: str = ""
    kind: Literal["metric", "expectation"] = "metric"
    extra: dict[str, Any] = field(default_factory=dict)
    #: the IDs of the requirements the check proves, as the catalogue declares them (thresholds.yaml,
    #: ``requirements``; gpuaccept/data/requirements.yaml): the record names them on every check, so a
    #: reader groups verdicts by requirement without the catalogue (a record written before them: none)
    requirements: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        """``node GPU 3 (bus)``, or the other subject the test named (``node HCA mlx5_2 port 1``)."""
        if self.subject is None or self.subject_kind == "node":
            return self.node
        shown = _SHOWN.get(self.subject_kind)  # a rail names itself: ``rail 3 (mlx5_3)``
        return f"{self.node} {shown} {self.subject}" if shown else f"{self.node} {self.subject}"

    @property
    def what(self) -> str:
        """``GPU 3 (bus)``, ``HCA mlx5_0 port 1``, ``rail 3 (mlx5_3)``: the subject as ``where`` names it
        without the node ("" for a check about the node itself)."""
        return self.where[len(self.node) :].strip()

    @property
    def on_gpu(self) -> bool:
        """The check is about one GPU (not a GPU pair, an HCA, a task or a fingerprint field)."""
        return self.subject_kind == "gpu" and self.subject is not None

    @property
    def gpu_index(self) -> int | None:
        """The GPU's index for a check about one GPU (``3`` of ``3 (0000:9A:00.0)``): the one place a
        GPU label is read back, for heat maps and per-GPU tables."""
        if not self.on_gpu:
            return None
        head = str(self.subject).split(" ", 1)[0]
        return int(head) if head.isdigit() else None

    @property
    def judged(self) -> bool:
        return self.verdict in JUDGED

    def limit_text(self) -> str:
        """What was expected, as an operator reads it: ``>= 600``, ``== match``, ``no limit``."""
        bounds = bounds_text(self.min, self.max, self.equal)
        if bounds:
            return bounds
        return {"info": "informational", "measured": "no limit yet (calibration)"}.get(self.verdict, "no limit")

    @property
    def margin_pct(self) -> float | None:
        """How far a judged figure stands from its nearest limit, in percent of that limit: positive inside,
        negative beyond it (``(value - min) / |min|``, ``(max - value) / |max|``, the smaller of the two).
        None for a check without a numeric limit, and for a limit of 0 (a count that must be none has no
        room to measure: a healthy part sits on it). The record and the summary show it, so a reader sees
        which healthy figure is close to failing before it does."""
        value = self.value
        if self.verdict not in JUDGED or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        room: list[float] = []
        if self.min:
            room.append((value - self.min) / abs(self.min))
        if self.max:
            room.append((self.max - value) / abs(self.max))
        return min(room) * 100 if room else None

    def _margin_shown(self) -> float | None:
        """``margin_pct`` as the record writes it (two decimals)."""
        margin = self.margin_pct
        return None if margin is None else round(margin, 2)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "margin_pct": self._margin_shown()}

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
            "requirements": list(self.requirements),
            "margin_pct": self._margin_shown(),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MetricResult:
        """From a run record's JSON. Records of schema ``gpuaccept.run/1`` named the subject in ``gpu``
        and its kind in ``extra.component`` (a GPU pair by an arrow in the label), and those of ``/1``
        and ``/2`` carried ``extra.baseline`` (value and file) on a regression only; they are migrated
        here. Records before the ``kind`` field, or with ``reported``, read as info."""
        data = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        if data.get("verdict") == "reported":
            data["verdict"] = "info"
        if "gpu" in raw and "subject" not in raw:
            data["subject"], data["subject_kind"] = subject_of(raw)
            data["extra"] = {k: v for k, v in (raw.get("extra") or {}).items() if k != "component"}
        old = (data.get("extra") or {}).get("baseline")
        if isinstance(old, dict) and "status" not in old:  # run/1 and /2: only a regression carried it
            data["extra"] = {**data["extra"], "baseline": _regression_of_run2(old, raw.get("value"))}
        return cls(**data)


def number(value: Any) -> float | None:
    """A check's value as a finite float, or None (bools, strings, NaN and infinities are no figure to compare
    with the baseline's or to draw)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    result = float(value)
    return result if math.isfinite(result) else None


def bounds_text(low: float | None, high: float | None, equal: float | str | None) -> str:
    """``>= 600``, ``<= 8``, ``>= 0.95 and <= 1.05``, ``== none``: a limit as an operator reads it ("" for none),
    the one wording the record, the report and docs/requirements.md share."""
    parts = []
    if low is not None:
        parts.append(f">= {low:g}")
    if high is not None:
        parts.append(f"<= {high:g}")
    if equal is not None:
        parts.append(f"== {equal}")
    return " and ".join(parts)


def _regression_of_run2(old: dict[str, Any], now: Any) -> dict[str, Any]:
    """A ``gpuaccept.run/2`` regressed check's ``extra.baseline`` (value and file) in the layout of
    ``gpuaccept.run/3`` (``results.comparison.Comparison``); its tolerance was not recorded."""
    base = old.get("value")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (base, now))
    delta = (now - base) / abs(base) * 100 if numbers and base else None
    better = "higher" if numbers and now < base else "lower"
    return {
        "value": base,
        "file": old.get("file"),
        "status": "regressed",
        "delta_pct": delta,
        "tolerance_pct": None,
        "better": better,
    }


def subject_of(raw: dict[str, Any]) -> tuple[str | None, SubjectKind]:
    """The subject and its kind of a recorded metric: its own fields, or for a ``gpuaccept.run/1``
    record the ``gpu`` label and ``extra.component`` it used instead."""
    if "subject" in raw:
        return raw["subject"], raw.get("subject_kind", "node")
    label = raw.get("gpu")
    if label is None:
        return None, "node"
    component = str((raw.get("extra") or {}).get("component", "GPU"))
    if component == "GPU":
        return str(label), "pair" if "->" in str(label) else "gpu"
    kind = {"HCA": "hca", "rank": "rank", "field": "field", "partition": "partition"}.get(component, "gpu")
    return str(label), kind  # type: ignore[return-value]
