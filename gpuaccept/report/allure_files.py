"""The two files Allure reads beside the results: environment.properties and categories.json.

``environment.properties`` is the report's Overview "Environment" panel: what was tested (cluster,
nodes, GPU model) with which stack (driver, CUDA, NCCL, torch), by which suite version, against which
thresholds (their digest, so two reports judged by different numbers are told apart), and what changed
since the baseline. ``categories.json`` sorts failures by cause, which is what a customer asks first:
is it the hardware, the configuration, our measurement, or a slide since the last run?

Allure matches a category's regexes against the whole status message (Java ``matches()``, DOTALL) and
puts a test into every category that matches; the patterns below are written to be disjoint, so each
failure lands in exactly one. allure-pytest reports an ``AssertionError`` as *failed* and any other
exception (our ``MeasurementError``) as *broken*: broken is "could not measure".
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["CATEGORIES", "HARDWARE_PATTERN", "environment", "write_categories", "write_environment"]

#: Hardware faults, by the metric names the health probes report (thresholds.yaml) and the words
#: their messages use: ECC errors and mode, row remapping and retired pages, XIDs, NVLink links,
#: errors and P2P status, every InfiniBand port/link metric, PCIe links trained down, failing clock
#: events (HW slowdown, thermal, power brake). Bandwidth and FLOP misses are threshold misses.
HARDWARE_PATTERN = (
    r"\becc|_ecc|ecc_|\bxid|xid_|remapped_rows|row.?remap|retired.?page|"
    r"nvlink_(?:links|pair_links|crc|replay|recovery|status)|p2p_nvlink_|nvlink\w*\s+(?:is\s+)?(?:down|inactive)|"
    r"links?\s+(?:is\s+|are\s+)?(?:down|inactive)|\bib_\w+|\bib\b[^\n]*\b(?:down|polling|armed)\b|"
    r"port\s+\S+\s+is\s+(?:down|polling|init)|pcie_(?:gen|width|link)|clock_events_failing"
)
_DRIFT = r"configuration drift"
_REGRESSION = r"regressed\s+\S+%\s+vs baseline"
_THRESHOLD = r"threshold miss"

CATEGORIES: list[dict[str, Any]] = [
    {
        "name": "Hardware fault (ECC, XID, NVLink or IB down)",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?i).*(?:{HARDWARE_PATTERN}).*",
    },
    {
        "name": "Configuration drift (versions differ across nodes)",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?i)(?!.*(?:{HARDWARE_PATTERN})).*{_DRIFT}.*",
    },
    {
        "name": "Threshold miss",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?i)(?!.*(?:{HARDWARE_PATTERN}|{_DRIFT})).*{_THRESHOLD}.*",
    },
    {
        "name": "Regression against baseline",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?i)(?!.*(?:{HARDWARE_PATTERN}|{_DRIFT}|{_THRESHOLD})).*{_REGRESSION}.*",
    },
    {
        "name": "Other failed check",
        "matchedStatuses": ["failed"],
        "messageRegex": f"(?i)(?!.*(?:{HARDWARE_PATTERN}|{_DRIFT}|{_THRESHOLD}|{_REGRESSION})).*",
    },
    {
        "name": "Could not measure (infrastructure)",
        "matchedStatuses": ["broken"],
    },
]


def write_categories(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "categories.json"
    path.write_text(json.dumps(CATEGORIES, indent=2) + "\n")
    return path


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


def _suite_version() -> str:
    try:
        return importlib.metadata.version("gpuaccept")
    except importlib.metadata.PackageNotFoundError:
        from gpuaccept import __version__

        return str(__version__)


def _short_list(items: list[str], keep: int = 12) -> str:
    return ", ".join(items) if len(items) <= keep else ", ".join(items[:keep]) + f", ... ({len(items)} in all)"


def environment(
    record: Mapping[str, Any],
    record_path: Path | None = None,
    *,
    baseline: str | None = None,
    changes: Iterable[str] = (),
    regressions: Iterable[str] = (),
) -> dict[str, str]:
    """The Environment panel as ordered key -> value (``record`` is ``RunRecord.to_dict()``)."""
    cluster = record.get("cluster") or {}
    fps = record.get("fingerprints") or {}
    nodes = [str(n) for n in cluster.get("nodes") or sorted(fps)]
    counts = record.get("counts") or {}
    skus = sorted({str(m.get("sku")) for m in record.get("metrics") or [] if m.get("sku")})
    thresholds = record.get("thresholds") or {}
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
        "Suite version": f"gpuaccept {_suite_version()}",
        "Thresholds digest": str(thresholds.get("digest") or "unknown"),
        "Thresholds files": ", ".join(Path(f).name for f in thresholds.get("files") or []) or "unknown",
        "Started": str(record.get("started", "")),
        "Status": str(record.get("status", "")),
        "Tests": ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "none",
    }
    if record_path is not None:
        out["Run record"] = str(record_path)
    if baseline is not None:
        regressed = list(regressions)
        out["Baseline"] = baseline
        out["Changes vs baseline"] = "; ".join(changes) or "none in driver, CUDA, NCCL, torch, kernel, OS, GPUs"
        out["Regressions vs baseline"] = f"{len(regressed)}" + (f": {_short_list(regressed, 5)}" if regressed else "")
    return out


def _escape(text: str, key: bool) -> str:
    """Java ``Properties`` escaping (ISO-8859-1 file: everything else as ``\\uXXXX``)."""
    out = []
    for index, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char in "=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) > 0x7E:
            out.append(f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else "?")
        else:
            out.append(char)
    return "".join(out)


def write_environment(directory: Path, values: Mapping[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "environment.properties"
    lines = [f"{_escape(k, key=True)}={_escape(v, key=False)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path
