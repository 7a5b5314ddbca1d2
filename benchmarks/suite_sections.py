"""Where a finished acceptance run's time went, from its run record (not a timed test).

    python benchmarks/suite_sections.py reports/runs/latest.json             # one run
    python benchmarks/suite_sections.py run1.json run2.json run3.json        # several: min / median / max

For each run record: the wall time, the summed test time of each section (test module), slowest first
(sections run one after another without xdist, so their sum is the suite's measuring time; the rest is
pytest's start-up and the allocation), and each shared probe launch's phases as the probe measured
them (the ``train_launch_wall_s`` and ``gpubench_wall_s`` figures carry them): the srun step's wall,
the process's own wall (the difference is srun, process exit and teardown), start-up (interpreter,
imports, CUDA/NCCL initialisation), warm-up, timed measurement, and the rest.

With several records (the same suite run again) it adds what the issue asks to see: the wall time and
every section and phase as min / median / max over the runs, and every judged figure's spread: its
min / median / max over the runs, (max - min) / median in percent, and the largest spread of the timed
batches inside one run (``spread_pct`` in the figure's record). A figure whose spread reaches the
straggler margin (10%) is marked: its measurement window is too short to judge a GPU against its
siblings.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

STRAGGLER_PCT = 10.0
PHASE_ORDER = ("step_s", "process_wall_s", "launcher_s", "startup_s", "setup_s", "warmup_s", "measure_s")


def sections(record: dict[str, Any]) -> list[tuple[str, float, int]]:
    """(section, summed test seconds, tests), slowest first."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test in record["tests"]:
        module = Path(test["nodeid"].split("::")[0]).stem.removeprefix("test_")
        totals[module] += test["duration_s"]
        counts[module] += 1
    return sorted(((m, totals[m], counts[m]) for m in totals), key=lambda row: -row[1])


def launches(record: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """Every probe launch whose phases are on the record: (label, flat phases in seconds)."""
    out = []
    for metric in record.get("metrics") or []:
        extra = metric.get("extra") or {}
        phases = extra.get("phases")
        if not isinstance(phases, dict):
            continue
        flat = {k: float(v) for k, v in phases.items() if isinstance(v, (int, float))}
        for part, seconds in (phases.get("by_part_s") or {}).items():
            flat[f"{part}_part_s"] = float(seconds)
        if isinstance(extra.get("step_s"), (int, float)):
            flat["step_s"] = float(extra["step_s"])
            if "process_wall_s" in flat:
                flat["launcher_s"] = round(flat["step_s"] - flat["process_wall_s"], 3)
        label = f"{metric['metric'].removesuffix('_wall_s')}[{metric.get('node')}]"
        out.append((label, flat))
    return out


def _order(keys: list[str]) -> list[str]:
    first = [k for k in PHASE_ORDER if k in keys]
    return first + sorted(k for k in keys if k not in first)


def print_record(path: Path, record: dict[str, Any]) -> None:
    print(f"{path}: wall {record['duration_s']:.1f} s, status {record['status']}, counts {record['counts']}")
    for module, seconds, count in sections(record):
        print(f"  {module:<16} {seconds:7.1f} s  ({count} tests)")
    for label, flat in launches(record):
        print(f"  {label}: " + ", ".join(f"{k.removesuffix('_s')} {flat[k]:.2f}" for k in _order(list(flat))))


def _mmm(values: list[float]) -> str:
    return f"{min(values):7.1f} {statistics.median(values):7.1f} {max(values):7.1f}"


def figures(records: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every judged or reported numeric figure per (metric, node, GPU): its value in each run, its largest
    in-run spread (phases and wall times are left to the tables above)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        for metric in record.get("metrics") or []:
            value = metric.get("value")
            if metric.get("verdict") not in ("pass", "fail", "info") or isinstance(value, bool):
                continue
            if not isinstance(value, (int, float)) or metric["metric"].endswith("_wall_s"):
                continue
            key = (metric["metric"], str(metric.get("node")), str(metric.get("gpu") or ""))
            entry = out.setdefault(key, {"values": [], "batch_spread_pct": None})
            entry["values"].append(float(value))
            inner = (metric.get("extra") or {}).get("spread_pct")
            if isinstance(inner, (int, float)):
                entry["batch_spread_pct"] = max(entry["batch_spread_pct"] or 0.0, float(inner))
    return out


def print_summary(records: list[dict[str, Any]], show: str) -> None:
    print(f"\n{len(records)} runs: min / median / max")
    print(f"  {'wall':<34} {_mmm([r['duration_s'] for r in records])} s")
    by_section: dict[str, list[float]] = defaultdict(list)
    for record in records:
        for module, seconds, _ in sections(record):
            by_section[module].append(seconds)
    for module, values in sorted(by_section.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {'section ' + module:<34} {_mmm(values)} s")
    by_phase: dict[tuple[str, str], list[float]] = defaultdict(list)
    for record in records:
        for label, flat in launches(record):
            for key, value in flat.items():
                by_phase[(label, key)].append(value)
    for (label, key), values in sorted(by_phase.items()):
        print(f"  {label + ' ' + key.removesuffix('_s'):<34} {_mmm(values)} s")
    print("\nfigures over the runs (min / median / max; spread = (max-min)/median; batch = largest in-run spread)")
    for (metric, node, gpu), entry in sorted(figures(records).items()):
        if show and not any(part in metric for part in show.split(",")):
            continue
        values = entry["values"]
        mid = statistics.median(values)
        across = (max(values) - min(values)) / abs(mid) * 100 if mid else 0.0
        inner = entry["batch_spread_pct"]
        worst = max(across, inner or 0.0)
        mark = "  <-- reaches the straggler margin" if worst >= STRAGGLER_PCT and len(values) > 1 else ""
        batch = f"{inner:5.2f}%" if inner is not None else "   -  "
        print(
            f"  {metric:<40} {node:<8} {gpu:<22} {min(values):>11.4g} {mid:>11.4g} {max(values):>11.4g}"
            f"  spread {across:5.2f}%  batch {batch} (n={len(values)}){mark}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", nargs="*", type=Path, default=[Path("reports/runs/latest.json")])
    parser.add_argument(
        "--figures",
        default="tflops,tbps,gbps,tokens_per_s,util,busbw",
        help="which figures' spread to list (metric name parts, comma-separated; '' = all judged figures)",
    )
    args = parser.parse_args()
    records = []
    for path in args.records:
        record = json.loads(path.read_text())
        records.append(record)
        print_record(path, record)
    if len(records) > 1:
        print_summary(records, args.figures)


if __name__ == "__main__":
    main()
