"""The site thresholds file a calibration writes: the operator's own site file (if any) with a new SKU
whose limits come from ``gpuaccept.calibrate.rule``, each with a source naming the run records, the
date, the nodes and the command. It is validated with the suite's own loader before it is kept.
"""

from __future__ import annotations

import copy
import datetime as _dt
import re
from pathlib import Path
from typing import Any

import yaml

from gpuaccept.calibrate.records import Runs
from gpuaccept.calibrate.rule import Calibrated
from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds

__all__ = ["RULE_DOC", "exact_match", "site_file", "write_site_file"]

RULE_DOC = "docs/calibrate.md"


def exact_match(nvml_name: str) -> str:
    """A ``match`` pattern for exactly this NVML name (GH200 is not H200: no prefix or suffix fits)."""
    return "^" + re.escape(nvml_name) + "$"


def _source(cal: Calibrated, runs: Runs, *, pct: float, k: float) -> str:
    dates = sorted(set(runs.dates))
    commands = sorted(set(runs.commands))
    if cal.equal is not None:
        rule = "every GPU, node and run agreed"
    elif cal.min is not None:
        rule = f"floor = max(min - {k:g} sd, median x (1 - {pct:g}%)), rounded down to 3 digits"
    else:
        rule = f"ceiling = min(max + {k:g} sd, median x (1 + {pct:g}%)), rounded up to 3 digits"
    return (
        f"gpuaccept-calibrate on nodes {', '.join(runs.nodes)} declared known-good, {', '.join(dates)}: "
        f"{cal.figures()} over {len(runs.paths)} run(s) ({', '.join(str(p) for p in runs.paths)}; "
        f"command: {' | '.join(commands)}); {rule} ({RULE_DOC})"
    )


def site_file(
    runs: Runs,
    limits: dict[str, Calibrated],
    *,
    sku: str,
    gpu_name: str | None,
    inherits: str | None,
    base: dict[str, Any] | None,
    pct: float,
    k: float,
) -> dict[str, Any]:
    """The YAML document: ``base`` (the operator's site file) plus ``skus.<sku>`` with the new limits."""
    doc: dict[str, Any] = copy.deepcopy(base) if base else {}
    doc.setdefault("schema_version", 1)
    skus = doc.setdefault("skus", {})
    entry = skus.setdefault(sku, {})
    if gpu_name:
        entry["match"] = [exact_match(gpu_name)]
    if inherits and "inherits" not in entry:
        entry["inherits"] = inherits
    entry.setdefault(
        "description",
        f"calibrated by gpuaccept-calibrate on {', '.join(runs.nodes)} "
        f"({_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d')})"
        + (f", NVML name {gpu_name}" if gpu_name else ""),
    )
    own = entry.setdefault("limits", {})
    for key, cal in sorted(limits.items()):
        limit: dict[str, Any] = {}
        for name in ("min", "max", "equal"):
            value = getattr(cal, name)
            if value is not None:
                limit[name] = value
        limit["source"] = _source(cal, runs, pct=pct, k=k)
        own[key] = limit
    return doc


def write_site_file(doc: dict[str, Any], path: Path, header: str) -> Path:
    """Write ``doc`` to ``path`` after the loader accepted it (schema, metric names, SKU references)."""
    text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    text += yaml.safe_dump(doc, sort_keys=False, width=200, allow_unicode=True)
    tmp = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(text)
    try:
        load_thresholds(tmp)
    except ThresholdsError as exc:
        tmp.unlink(missing_ok=True)
        raise ThresholdsError(f"the calibrated file would not load: {exc}") from None
    tmp.replace(path)
    return path
