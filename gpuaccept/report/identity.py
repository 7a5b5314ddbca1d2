"""What a run tested, with which stack, judged by which thresholds: one table for every place that says so.

The Allure report's Overview "Environment" panel (``environment.properties``) and the summary page's
identity table are both this: cluster, nodes, GPU model and SKU, driver, CUDA, NCCL, torch, kernel and
OS (one value when every node agrees, else each value with its nodes, so drift is visible), the suite
version, the thresholds' digest (two reports judged by different numbers are told apart), and what
changed since the baseline.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaccept.results.record import RunRecord

__all__ = ["environment"]


def _get(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _gpu_model(fingerprint: Mapping[str, Any]) -> str | None:
    gpus = fingerprint.get("gpus") or {}
    names = sorted({str(d.get("name")) for d in gpus.get("devices") or []})
    if not names and gpus.get("count") == 0:
        return "no GPU"
    return f"{', '.join(names)} x{gpus.get('count')}" if names else None


def _cluster_name(cluster: Mapping[str, Any]) -> str:
    name = cluster.get("name") or os.environ.get("SLURM_CLUSTER_NAME")
    if name:
        return str(name)
    if cluster.get("launcher") == "local":
        return f"local machine {', '.join(cluster.get('nodes') or [])}".strip()
    if cluster.get("partition"):
        return f"Slurm cluster of partition {cluster['partition']}"
    return "unnamed Slurm cluster"


def _across(fingerprints: Mapping[str, Any], pick: Any) -> str:
    """One value if every node agrees, else ``value (node1, node2); other (node3)``: drift is visible."""
    by_value: dict[str, list[str]] = {}
    for node, fp in sorted(fingerprints.items()):
        if isinstance(fp, dict) and "error" not in fp:
            value = pick(fp)
            by_value.setdefault("none" if value in (None, "") else str(value), []).append(node)
    if not by_value:
        return "unknown"
    if len(by_value) == 1:
        return next(iter(by_value))
    return "; ".join(f"{value} ({', '.join(nodes)})" for value, nodes in by_value.items())


def _container(container: Any) -> str:
    """The image the steps ran in as the options named it, with what identifies that file or bundle."""
    if not isinstance(container, dict):
        return "none (steps ran on the hosts)"
    facts = [f"{k} {container[k]}" for k in ("size_bytes", "mtime", "config_sha256") if container.get(k)]
    kind = "OCI bundle, srun --container" if container.get("kind") == "oci" else "pyxis/enroot"
    return f"{container.get('image')} ({kind}{'; ' + ', '.join(facts) if facts else ''})"


def _suite_version() -> str:
    try:
        return importlib.metadata.version("gpuaccept")
    except importlib.metadata.PackageNotFoundError:
        from gpuaccept import __version__

        return str(__version__)


def _short_list(items: list[str], keep: int = 12) -> str:
    return ", ".join(items) if len(items) <= keep else ", ".join(items[:keep]) + f", ... ({len(items)} in all)"


def environment(
    record: RunRecord,
    record_path: Path | None = None,
    *,
    cluster_name: str | None = None,
    baseline: str | None = None,
    changes: Iterable[str] = (),
    regressions: Iterable[str] = (),
) -> dict[str, str]:
    """What was tested with what, as ordered key -> value (``cluster_name``: Slurm's name for the
    cluster when the record has none)."""
    cluster = dict(record.cluster)
    if cluster_name and not cluster.get("name"):
        cluster["name"] = cluster_name
    fps = record.fingerprints
    nodes = [str(n) for n in cluster.get("nodes") or sorted(fps)]
    counts = record.counts
    skus = sorted({m.sku for m in record.metrics if m.sku})
    thresholds = record.thresholds
    out = {
        "Cluster": _cluster_name(cluster),
        "Launcher": str(cluster.get("launcher") or "unknown"),
        "Partition": str(cluster.get("partition") or "default"),
        "Slurm job": str(cluster.get("job_id") or "none"),
        "Nodes": f"{len(nodes)}: {_short_list(nodes)}" if nodes else "none",
        "GPU model": _across(fps, _gpu_model),
        "SKU": ", ".join(skus) or "unknown",
        "Driver": _across(fps, lambda fp: _get(fp, ("gpus", "driver"))),
        "CUDA": _across(fps, lambda fp: _get(fp, ("gpus", "cuda_driver"))),
        "NCCL": _across(fps, lambda fp: _get(fp, ("stack", "nccl"))),
        "torch": _across(fps, lambda fp: _get(fp, ("stack", "torch"))),
        "Python": _across(fps, lambda fp: _get(fp, ("stack", "python"))),
        "Kernel": _across(fps, lambda fp: fp.get("kernel")),
        "OS": _across(fps, lambda fp: fp.get("os")),
        "Container": _container(cluster.get("container")),
        "Image inside": _across(fps, lambda fp: _get(fp, ("container", "image"))),
        "Container runtime": _across(fps, lambda fp: _get(fp, ("container", "runtime_versions"))),
        "Suite version": f"gpuaccept {record.suite.get('version') or _suite_version()}",
        "Suite commit": f"{record.suite.get('commit') or 'unknown'} (edited: {record.suite.get('edited')})",
        "Thresholds digest": str(thresholds.get("digest") or "unknown"),
        "Thresholds files": ", ".join(Path(f).name for f in thresholds.get("files") or []) or "unknown",
        "Started": record.started.isoformat(),
        "Status": record.status,
        "Tests": ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "none",
    }
    if record.test_hooks:
        out["Test hooks"] = ", ".join(sorted(record.test_hooks))
    if record.loosened:
        out["Limits loosened by a site file"] = str(len(record.loosened))
    if record_path is not None:
        out["Run record"] = str(record_path)
    if baseline is not None:
        regressed = list(regressions)
        out["Baseline"] = baseline
        out["Changes vs baseline"] = "; ".join(changes) or "none in driver, CUDA, NCCL, torch, kernel, OS, GPUs"
        out["Regressions vs baseline"] = f"{len(regressed)}" + (f": {_short_list(regressed, 5)}" if regressed else "")
    return out
