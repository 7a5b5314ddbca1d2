"""Keep the judged figures of healthy GPU runs, for tests/selftest/test_margins.py.

    python benchmarks/healthy_figures.py fixtures/healthy-figures.json "<machine>" "<command>" RECORD...

Appends one entry per run record: the machine (what it is, named by hand), the command, the run's date,
its SKU and site file, and for every numeric check it judged the lowest and highest figure across the
node's GPUs (a floor is judged on the lowest, a ceiling on the highest). The selftest holds today's limits
to these figures: none may fail a healthy run, and one within 5% must say why. A metric whose earlier figures
no longer bound today's code (a faster kernel) is taken out of the older runs by hand and named under
``dropped`` with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def figures(record: dict[str, Any]) -> dict[str, list[float]]:
    """``metric -> [lowest, highest]`` of the judged numeric checks."""
    out: dict[str, list[float]] = {}
    for m in record["metrics"]:
        value = m["value"]
        if m["verdict"] not in ("pass", "fail") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        span = out.setdefault(m["metric"], [value, value])
        span[0], span[1] = min(span[0], value), max(span[1], value)
    return out


def entry(record: dict[str, Any], machine: str, command: str) -> dict[str, Any]:
    skus = sorted({m["sku"] for m in record["metrics"] if m.get("sku")})
    site = Path(str(record["settings"].get("thresholds") or "")).name
    return {
        "machine": machine,
        "date": record["started"][:10],
        "command": command,
        "verdict": record["verdict"],
        "wall_s": record["duration_s"],
        "sku": next(s for s in skus if s != "cpu"),
        "site": f"fixtures/site/{site}" if site else None,
        "figures": figures(record),
    }


def main() -> None:
    out, machine, command, *records = sys.argv[1:]
    path = Path(out)
    kept = json.loads(path.read_text()) if path.exists() else {"runs": []}
    for name in records:
        kept["runs"].append(entry(json.loads(Path(name).read_text()), machine, command))
    path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
