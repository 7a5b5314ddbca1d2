"""Environment: what each node is, and whether the nodes agree with each other."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

pytestmark = [pytest.mark.acceptance, pytest.mark.environment]

#: Fingerprint fields that must be identical on every node (configuration drift otherwise).
CONSISTENT: dict[str, tuple[str, ...]] = {
    "GPU driver": ("gpus", "driver"),
    "CUDA driver version": ("gpus", "cuda_driver"),
    "NCCL": ("stack", "nccl"),
    "torch": ("stack", "torch"),
    "Python": ("stack", "python"),
    "kernel": ("kernel",),
    "OS": ("os",),
}


def _get(fingerprint: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = fingerprint
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def test_fingerprint(node, cluster, fingerprints, limits):
    """The node answers with a complete fingerprint and shows every GPU it declares."""
    fp = fingerprints.get(node)
    assert fp["node"] == node, f"{node}: the probe ran on {fp['node']!r}, not on the node it was sent to"
    assert fp["kernel"] and fp["os"] != "unknown", f"{node}: OS or kernel could not be read: {fp['os']!r}"
    declared = cluster.gpus_on(node)
    shown = fp["gpus"]["count"]
    assert shown == declared, f"{node}: declares {declared} GPU(s) but NVML shows {shown}" + (
        f" ({', '.join(d['pci_bus_id'] for d in fp['gpus']['devices'])})" if shown else ""
    )
    if shown:
        assert fp["gpus"]["driver"], f"{node}: GPUs present but the driver version is unreadable"
        assert fp["stack"]["torch"], f"{node}: torch is not importable: {fp['stack'].get('torch_error')}"
    limits.report("memory_gib", fp["memory_gib"], node=node)
    limits.report("cpu_cores", fp["cpu"]["cores"], node=node)
    limits.report("usable_cpus", fp["cpu"]["usable_cpus"], node=node)
    limits.report("gpu_count", shown, node=node)
    limits.verify()


@pytest.mark.multinode
def test_versions_consistent(cluster, fingerprints):
    """Driver, CUDA, NCCL, torch, GPU model, OS and kernel are the same everywhere; name the odd node."""
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("single-node allocation: nothing to compare")
    fingerprints.prefetch(nodes)  # all nodes at once, not a step time per node
    prints = {node: fingerprints.get(node) for node in nodes}
    drift: list[str] = []
    fields = dict(CONSISTENT)
    for fp in prints.values():
        fp.setdefault("_gpu_models", ",".join(sorted({d["name"] for d in fp["gpus"]["devices"]})) or None)
    fields["GPU model"] = ("_gpu_models",)
    for label, path in fields.items():
        values = {node: _get(fp, path) for node, fp in prints.items()}
        counts = Counter(values.values())
        if len(counts) > 1:
            majority, _ = counts.most_common(1)[0]
            odd = {n: v for n, v in values.items() if v != majority}
            drift.append(f"{label}: {majority!r} on most nodes, but " + ", ".join(f"{n}={v!r}" for n, v in odd.items()))
    assert not drift, "configuration drift across nodes:\n  " + "\n  ".join(drift)
