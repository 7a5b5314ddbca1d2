"""The fingerprint fields a verdict compares: across nodes (drift) and across runs (what changed).

One catalogue, read by the cross-node consistency test and by the baseline's "what changed since"
diff, so the two never disagree about what a driver or an NCCL version is called or where it sits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FINGERPRINT_FIELDS", "Drift", "FingerprintField", "drift", "field_value"]


@dataclass(frozen=True)
class FingerprintField:
    """A fingerprint value: its label, where it sits, and whether every node must agree on it."""

    label: str
    path: tuple[str, ...]
    across_nodes: bool = True


FINGERPRINT_FIELDS: tuple[FingerprintField, ...] = (
    FingerprintField("driver", ("gpus", "driver")),
    FingerprintField("CUDA", ("gpus", "cuda_driver")),
    FingerprintField("NCCL", ("stack", "nccl")),
    FingerprintField("torch", ("stack", "torch")),
    FingerprintField("torch CUDA", ("stack", "torch_cuda")),
    FingerprintField("Python", ("stack", "python")),
    FingerprintField("kernel", ("kernel",)),
    FingerprintField("OS", ("os",)),
    FingerprintField("GPU model", ("_gpu_model",)),
    # the image the steps ran in (its marker) and the runtimes that started it, read on the host side
    FingerprintField("image", ("container", "image")),
    FingerprintField("container runtime", ("container", "runtime_versions")),
    # differ legitimately between nodes (a CPU login node, boards of two VBIOS batches): per-run only
    FingerprintField("GPU count", ("gpus", "count"), across_nodes=False),
    FingerprintField("VBIOS", ("_vbios",), across_nodes=False),
)


def field_value(fingerprint: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path``; ``_gpu_model``/``_vbios`` are the sorted set over the node's GPUs."""
    if path in (("_gpu_model",), ("_vbios",)):
        key = "name" if path == ("_gpu_model",) else "vbios"
        devices = (fingerprint.get("gpus") or {}).get("devices") or [] if isinstance(fingerprint, dict) else []
        return ",".join(sorted({str(d.get(key)) for d in devices if d.get(key)})) or None
    value = fingerprint
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


@dataclass(frozen=True)
class Drift:
    """One node whose field differs from what most nodes have."""

    field: str
    node: str
    value: Any
    majority: Any


def drift(prints: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[Drift]]:
    """``(per field: node -> value, the odd nodes)`` over the fields every node must agree on.

    The majority value is the reference; with no majority (two nodes, two values) the first node's
    value in sorted order is taken, so both nodes still appear in the evidence.
    """
    values: dict[str, dict[str, Any]] = {}
    odd: list[Drift] = []
    for spec in FINGERPRINT_FIELDS:
        if not spec.across_nodes:
            continue
        seen = {node: field_value(fp, spec.path) for node, fp in sorted(prints.items())}
        values[spec.label] = seen
        counts = Counter(seen.values())
        if len(counts) > 1:
            majority = counts.most_common(1)[0][0]
            odd += [Drift(spec.label, n, v, majority) for n, v in seen.items() if v != majority]
    return values, odd
