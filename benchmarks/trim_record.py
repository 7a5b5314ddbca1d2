"""Trim a run record to what tests/selftest/test_sku_coverage.py holds the coverage declaration to.

    python benchmarks/trim_record.py reports/runs/<id>.json fixtures/runs/<machine>.json "<how it was run>"

Keeps the tests (id, verdict, message), the distinct checks of each test (metric, SKU, kind, verdict),
the settings and thresholds files of the run and each node's GPU count and names; drops the figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _where(path: str) -> str:
    """A thresholds file as the selftest finds it: a site file by name, the packaged file in the package."""
    if path.endswith("gpuaccept/data/thresholds.yaml"):
        return "gpuaccept/data/thresholds.yaml"
    return Path(path).name


def trim(record: dict[str, Any], note: str) -> dict[str, Any]:
    checks: list[dict[str, Any]] = []
    for m in record["metrics"]:
        entry = {k: m.get(k) for k in ("test", "metric", "sku", "kind", "verdict")}
        if entry not in checks:
            checks.append(entry)
    gpus = {
        node: {
            "gpus": {
                "count": fp.get("gpus", {}).get("count"),
                "devices": [{"name": d.get("name")} for d in fp.get("gpus", {}).get("devices", [])],
            }
        }
        for node, fp in record["fingerprints"].items()
        if isinstance(fp, dict) and "gpus" in fp
    }
    return {
        "note": note,
        "schema": record["schema"],
        "status": record["status"],
        "counts": record["counts"],
        "settings": {k: record["settings"].get(k) for k in ("nodes", "thresholds", "sku", "burn_in", "nccl_ring")},
        "cluster": record["cluster"],
        "thresholds": {"files": [_where(f) for f in record["thresholds"]["files"]]},
        "fingerprints": gpus,
        "tests": [{k: t.get(k) for k in ("nodeid", "verdict", "message")} for t in record["tests"]],
        "metrics": checks,
    }


def main() -> None:
    source, target, note = sys.argv[1], sys.argv[2], sys.argv[3]
    Path(target).write_text(json.dumps(trim(json.loads(Path(source).read_text()), note), indent=1) + "\n")


if __name__ == "__main__":
    main()
