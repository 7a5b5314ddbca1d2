"""What a calibration takes from run records: the figures measured without a limit, and whether the
runs were fit to calibrate from at all (every test that could be judged passed, one GPU model).
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuaccept.calibrate.rule import Refusal, Sample
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord, read_record

__all__ = ["Runs", "limit_key", "read_runs"]


def limit_key(check: MetricResult) -> str:
    """The thresholds key a check was looked up under: ``metric@N`` when it was judged at a scale
    (an 8-GPU node's floor must not apply to a 4-GPU node), else the metric."""
    scale = check.extra.get("scale")
    return f"{check.metric}@{int(scale)}" if isinstance(scale, (int, float)) else check.metric


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


def _gpu_names(record: RunRecord) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for node, fp in record.fingerprints.items():
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
        bad = [t for t in record.tests.values() if t.verdict in ("failed", "error")]
        if bad:
            lines = [f"{t.nodeid} {t.verdict}: {(t.message.splitlines() or [''])[0][:200]}" for t in bad]
            raise Refusal(
                f"{path}: {len(bad)} test(s) did not pass on nodes declared known-good; a calibration needs every "
                "test that can be judged to pass:\n  " + "\n  ".join(lines)
            )
        if record.status not in ("passed", "failed"):
            raise Refusal(f"{path}: the run did not finish (status {record.status})")
        for node, names in _gpu_names(record).items():
            models.setdefault(node, set()).update(names)
        for check in record.metrics:
            wanted = check.verdict == "measured" or any(fnmatch.fnmatchcase(check.metric, g) for g in recalibrate)
            if not wanted or check.kind == "expectation" or check.value is None:
                continue
            runs.samples.setdefault(limit_key(check), []).append(Sample(check.value, check.node, check.subject, run))
            if check.sku and check.sku not in runs.skus:
                runs.skus.append(check.sku)
        for node in record.cluster.get("nodes") or sorted(models):
            if str(node) not in runs.nodes:
                runs.nodes.append(str(node))
        runs.dates.append(record.started.isoformat()[:10])
        runs.commands.append(_without_record(record.command) or "(an older record: no command)")
    every = sorted({name for names in models.values() for name in names})
    if len(every) > 1:
        odd = "; ".join(f"{node}: {', '.join(sorted(names)) or 'no GPU'}" for node, names in sorted(models.items()))
        raise Refusal(f"the nodes do not have one GPU model ({odd}); calibrate each model on its own nodes")
    runs.gpu_names = every
    return runs
