"""What a calibration takes from run records: the figures measured without a limit, and whether the
runs were fit to calibrate from at all (every test that could be judged passed, one GPU model).
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaccept.calibrate.rule import Refusal, Sample
from gpuaccept.results.metrics import subject_of
from gpuaccept.results.record import read_record

__all__ = ["Runs", "limit_key", "read_runs"]


def limit_key(metric: dict[str, Any]) -> str:
    """The thresholds key a check was looked up under: ``metric@N`` when it was judged at a scale
    (an 8-GPU node's floor must not apply to a 4-GPU node), else the metric."""
    scale = (metric.get("extra") or {}).get("scale")
    return f"{metric['metric']}@{int(scale)}" if isinstance(scale, (int, float)) else str(metric["metric"])


@dataclass
class Runs:
    """Run records read for a calibration."""

    paths: list[Path]
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    gpu_names: list[str] = field(default_factory=list)
    skus: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def _gpu_names(record: dict[str, Any], path: Path) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for node, fp in (record.get("fingerprints") or {}).items():
        devices = ((fp or {}).get("gpus") or {}).get("devices") or []
        names[str(node)] = {str(d.get("name")) for d in devices if d.get("name")}
    return names


def _without_record(command: str) -> str:
    """The command without its ``--run-record PATH`` (the records are named beside it), so the runs of
    one calibration read as one command."""
    words = shlex.split(command)
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--run-record":
            skip = True
        elif not word.startswith("--run-record="):
            out.append(word)
    return shlex.join(out)


def read_runs(paths: Sequence[Path], *, recalibrate: Sequence[str] = ()) -> Runs:
    """Every figure the records measured without a limit (``measured``; and any figure of a metric
    matching ``recalibrate``), after refusing records whose tests failed or could not measure."""
    runs = Runs(list(paths))
    models: dict[str, set[str]] = {}
    for path in paths:
        record = read_record(path)
        run = path.name
        bad = [t for t in record.get("tests") or [] if t.get("verdict") in ("failed", "error")]
        if bad:
            lines = [f"{t['nodeid']} {t['verdict']}: {str(t.get('message') or '').splitlines()[0][:200]}" for t in bad]
            raise Refusal(
                f"{path}: {len(bad)} test(s) did not pass on nodes declared known-good; a calibration needs every "
                "test that can be judged to pass:\n  " + "\n  ".join(lines)
            )
        if record.get("status") not in ("passed", "failed"):
            raise Refusal(f"{path}: the run did not finish (status {record.get('status')})")
        for node, names in _gpu_names(record, path).items():
            models.setdefault(node, set()).update(names)
        for metric in record.get("metrics") or []:
            wanted = metric.get("verdict") == "measured" or any(
                fnmatch.fnmatchcase(str(metric.get("metric")), g) for g in recalibrate
            )
            if not wanted or metric.get("kind") == "expectation" or metric.get("value") is None:
                continue
            sample = Sample(metric["value"], str(metric["node"]), subject_of(metric)[0], run)
            runs.samples.setdefault(limit_key(metric), []).append(sample)
            if metric.get("sku") and metric["sku"] not in runs.skus:
                runs.skus.append(str(metric["sku"]))
        for node in (record.get("cluster") or {}).get("nodes") or sorted(models):
            if str(node) not in runs.nodes:
                runs.nodes.append(str(node))
        runs.dates.append(str(record.get("started", ""))[:10])
        runs.commands.append(_without_record(str(record.get("command") or "")) or "(an older record: no command)")
    every = sorted({name for names in models.values() for name in names})
    if len(every) > 1:
        odd = "; ".join(f"{node}: {', '.join(sorted(names)) or 'no GPU'}" for node, names in sorted(models.items()))
        raise Refusal(f"the nodes do not have one GPU model ({odd}); calibrate each model on its own nodes")
    runs.gpu_names = every
    return runs
