"""What a fine-tune's trajectory is and how two of them compare: the rule the fleet-agreement judge
(``verdicts.trajectory``) applies, with no check recorded here.

The built-in fine-tune is bitwise deterministic on one GPU: run to run, the maximum relative loss
difference over all 40 steps was 0.0 on an H100 80GB HBM3 and on an H200 (2026-11-23; docs/measurements.md,
"Training that tests the GPU"). Loss limits cannot see a GPU that computes slightly wrong (a silent
data corruption, a marginal SM, a flaky HBM bit still trains to a low loss); its trajectory can. This
module holds what that comparison needs and nothing that judges:

* ``stack_key``: the group a node's GPUs belong to (SKU and software stack: GPU model, driver, CUDA, NCCL,
  torch, transformers, peft; CPU model and architecture for gloo ranks), since only inside a group must
  curves agree (another GPU model or another torch legitimately trains another curve: H100 vs H200 are
  2.8% apart at step 13);
* ``Trajectory``: one GPU's exact losses and its trained weights' sha256;
* ``majority``: the trajectory more than half of a group trained exactly;
* ``departure``: where and by how much one trajectory leaves another.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaccept.judging.fields import FINGERPRINT_FIELDS, FingerprintField, field_value

__all__ = ["STACK_FIELDS", "Departure", "Trajectory", "departure", "key_text", "majority", "stack_key"]

_BY_LABEL = {f.label: f for f in FINGERPRINT_FIELDS}
#: What a trajectory depends on besides the GPU itself (the SKU is added from the node's detection).
STACK_FIELDS: tuple[FingerprintField, ...] = (
    *(_BY_LABEL[label] for label in ("GPU model", "driver", "CUDA", "NCCL", "torch", "torch CUDA")),
    FingerprintField("transformers", ("stack", "transformers")),
    FingerprintField("peft", ("stack", "peft")),
    FingerprintField("CPU", ("cpu", "model")),
    FingerprintField("arch", ("arch",)),
)


def stack_key(sku: str, fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The group a node's GPUs belong to: SKU plus every stack field (None where the node has none)."""
    return {"SKU": sku, **{spec.label: field_value(dict(fingerprint), spec.path) for spec in STACK_FIELDS}}


def key_text(key: Mapping[str, Any]) -> str:
    return ", ".join(f"{label} {value}" for label, value in key.items() if value is not None)


@dataclass(frozen=True)
class Trajectory:
    """One GPU's (or gloo rank's) fine-tune: exact per-step losses and the trained weights' sha256."""

    node: str
    gpu: str
    losses: tuple[float, ...]
    checksum: str | None = None
    #: the training profile (small, scale, pretrained): only runs of one model are compared
    profile: str = "small"

    @property
    def where(self) -> str:
        return f"{self.node} {self.gpu}" if self.gpu.startswith("cpu") else f"{self.node} GPU {self.gpu}"

    @property
    def signature(self) -> tuple[bytes, str | None]:
        """Bitwise identity: the losses' IEEE bytes (NaN equals NaN here) and the weights' checksum."""
        return struct.pack(f"<{len(self.losses)}d", *self.losses), self.checksum


@dataclass(frozen=True)
class Departure:
    """Where and by how much one trajectory leaves another."""

    step: int | None  # first step (1-based) beyond the tolerance; None when every step agrees
    value: float | None  # this GPU's loss there (None: it has no such step)
    reference: float | None
    rel_diff: float  # relative difference at that step
    max_rel_diff: float  # over every step
    weights_differ: bool

    def text(self) -> str:
        if self.step is None:
            return "every step agrees" + ("; the trained weights' sha256 differs" if self.weights_differ else "")
        now = "no such step" if self.value is None else repr(self.value)
        ref = "no such step" if self.reference is None else repr(self.reference)
        return f"first departs at step {self.step}: loss {now} vs {ref} ({self.rel_diff:.3g} relative)"


def _rel(value: float | None, ref: float | None) -> float:
    if value is None or ref is None:
        return math.inf
    if value == ref or (math.isnan(value) and math.isnan(ref)):
        return 0.0
    if not (math.isfinite(value) and math.isfinite(ref)) or ref == 0:
        return math.inf
    return abs(value - ref) / abs(ref)


def departure(now: Trajectory, ref: Trajectory, tolerance: float = 0.0) -> Departure:
    """Compare ``now`` with ``ref`` step by step; a missing step (a run that stopped) departs."""
    first: tuple[int, float | None, float | None, float] | None = None
    worst = 0.0
    for i in range(max(len(now.losses), len(ref.losses))):
        a = now.losses[i] if i < len(now.losses) else None
        b = ref.losses[i] if i < len(ref.losses) else None
        rel = _rel(a, b)
        worst = max(worst, rel)
        if first is None and rel > tolerance:
            first = (i + 1, a, b, rel)
    differ = None not in (now.checksum, ref.checksum) and now.checksum != ref.checksum
    if first is None:
        return Departure(None, None, None, 0.0, worst, differ)
    return Departure(first[0], first[1], first[2], first[3], worst, differ)


def majority(members: Sequence[Trajectory]) -> tuple[Trajectory | None, int]:
    """The trajectory more than half the members trained exactly (None if there is none), and how
    many share the most common one."""
    counts = Counter(m.signature for m in members)
    signature, count = counts.most_common(1)[0]
    if 2 * count <= len(members):
        return None, count
    return next(m for m in members if m.signature == signature), count
