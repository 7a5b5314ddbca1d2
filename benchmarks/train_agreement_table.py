"""Table of fine-tune runs for ``benchmarks/train_agreement.sh``: verdicts, loss figures, agreement.

    python benchmarks/train_agreement_table.py HEALTHY.json... [--perturbed PERTURBED.json]

Per run: verdicts, final train loss, eval loss, steps to loss 0.5, tokens/s, the training tests' wall
time; then each GPU's trajectory in every healthy run against run 1 (largest relative loss difference
over all steps, weights' sha256 equal or not); then what the perturbed run's agreement test named, and
the verdicts of the tests beside it (matmul, health).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

FIGURES = (
    ("train_loss_final", "final loss"),
    ("train_eval_loss", "eval loss"),
    ("train_steps_to_target", "steps to 0.5"),
    ("train_tokens_per_s_per_gpu_solo", "tokens/s"),
)


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _tests(record: dict[str, Any]) -> list[dict[str, Any]]:
    tests = record.get("tests") or {}
    return list(tests.values()) if isinstance(tests, dict) else list(tests)


def _figure(record: dict[str, Any], metric: str) -> str:
    values = [
        m["value"] for m in record.get("metrics", []) if m["metric"] == metric and "each_gpu" in str(m.get("test"))
    ]
    shown = [f"{v:.5g}" if isinstance(v, float) else str(v) for v in values]
    return "/".join(shown) or "-"


def _trajectories(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    metrics = record.get("metrics", [])
    return {f"{m['node']} {m['gpu']}": m["extra"] for m in metrics if m["metric"] == "train_trajectory"}


def _rel(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        return math.inf
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x != y:
            worst = max(worst, abs(x - y) / abs(y) if y else math.inf)
    return worst


def _spread(healthy: list[dict[str, Any]]) -> None:
    """Each GPU-alone figure over the healthy runs, min-max: what a SKU's limits are written from."""
    print("\nfigures over the healthy runs (min - max), each GPU alone:")
    for metric in (*(m for m, _ in FIGURES), "train_wall_s", "train_gpu_util_pct"):
        values = [
            float(m["value"])
            for record in healthy
            for m in record.get("metrics", [])
            if m["metric"] == metric and "each_gpu" in str(m.get("test")) and isinstance(m["value"], (int, float))
        ]
        if values:
            print(f"  {metric}: {min(values):.6g} - {max(values):.6g} ({len(values)} values)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+", type=Path)
    p.add_argument("--perturbed", type=Path)
    args = p.parse_args()
    named = [(f"healthy {i}", path) for i, path in enumerate(args.records, 1)]
    if args.perturbed:
        named.append(("perturbed", args.perturbed))
    loaded = [(name, _load(path)) for name, path in named if path.is_file()]
    header = ["run", "verdicts", *(label for _, label in FIGURES), "training wall s"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, record in loaded:
        tests = _tests(record)
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(Counter(t["verdict"] for t in tests).items()))
        wall = sum(float(t.get("duration_s") or 0) for t in tests if "test_training" in t["nodeid"])
        cells = [name, verdicts, *(_figure(record, metric) for metric, _ in FIGURES), f"{wall:.1f}"]
        print("| " + " | ".join(cells) + " |")
        for t in tests:
            if t["verdict"] in ("failed", "error"):
                print(f"    {t['verdict']}: {t['nodeid'].split('::')[-1]}: {str(t.get('message'))[:400]}")
    healthy = [r for n, r in loaded if n.startswith("healthy")]
    if healthy:
        first = _trajectories(healthy[0])
        print(f"\ntrajectories of healthy runs 2..{len(healthy)} against run 1 (largest relative loss difference):")
        for gpu, extra in sorted(first.items()):
            cells = []
            for record in healthy[1:]:
                other = _trajectories(record).get(gpu)
                if other is None:
                    cells.append("missing")
                    continue
                same = "same weights" if other.get("checksum") == extra.get("checksum") else "OTHER WEIGHTS"
                cells.append(f"{_rel(other['losses'], extra['losses']):.3g} ({same})")
            print(f"  {gpu}: {len(extra['losses'])} steps: " + "; ".join(cells or ["only one run"]))
    if healthy:
        _spread(healthy)
    for name, record in loaded:
        if name != "perturbed":
            continue
        print("\nperturbed run:")
        for t in _tests(record):
            test = t["nodeid"].split("::")[-1]
            if "agreement" in test or t["verdict"] != "passed":
                print(f"  {test}: {t['verdict']}: {str(t.get('message'))[:600]}")
            else:
                print(f"  {test}: {t['verdict']}")


if __name__ == "__main__":
    main()
