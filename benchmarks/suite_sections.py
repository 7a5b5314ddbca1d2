"""Per-section time of a finished acceptance run, from its run record (not a timed test).

``python benchmarks/suite_sections.py reports/runs/latest.json`` prints the record's wall time and the
summed test time of each section (test module), slowest first. Sections run one after another
without xdist, so their sum is the suite's measuring time; the rest is start-up and allocation.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def sections(record: dict) -> list[tuple[str, float, int]]:
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test in record["tests"]:
        module = Path(test["nodeid"].split("::")[0]).stem.removeprefix("test_")
        totals[module] += test["duration_s"]
        counts[module] += 1
    return sorted(((m, totals[m], counts[m]) for m in totals), key=lambda row: -row[1])


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/runs/latest.json")
    record = json.loads(path.read_text())
    print(f"{path}: wall {record['duration_s']:.1f} s, status {record['status']}, counts {record['counts']}")
    for module, seconds, count in sections(record):
        print(f"  {module:<16} {seconds:7.1f} s  ({count} tests)")


if __name__ == "__main__":
    main()
