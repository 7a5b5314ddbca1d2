r"""Compare two acceptance runs test by test: each test's verdict, and each check's verdict within it.

Why: a refactor of the judging (a module moved, a rule merged) must leave every verdict as it was. Run
the same suite on the same cluster before and after, then::

    python benchmarks/compare_verdicts.py BEFORE.json AFTER.json [--rename REGEX REPLACEMENT ...]

``--rename`` maps a test id of the earlier run onto the later one's (a parametrization that gained an
axis), applied in order with ``re.sub``: e.g. the training tests' profile axis (issue 29)::

    --rename 'agreement$' 'agreement[default]' --rename 'each_gpu\[(node\d+)\]' 'each_gpu[\1-default]' \
    --rename 'node\[(node\d+)-(ddp|fsdp)\]' 'node[\1-default-\2]' \
    --rename 'multinode\[(ddp|fsdp)\]' 'multinode[default-\1]'

Reads the run records (``reports/runs/*.json``, any schema that lists ``tests`` with ``nodeid``,
``verdict`` and ``checks``) as plain JSON, so a record of an older suite is read as it was written.
Prints the tests whose verdict changed, the tests only one run has (new or renamed parametrizations),
and, for tests in both, the checks (name and subject) whose verdict changed or that only one side
recorded. Exit 1 when a verdict differs, else 0.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _tests(path: Path, rename: Sequence[tuple[str, str]] = ()) -> dict[str, dict[str, Any]]:
    record = json.loads(path.read_text())
    out = {}
    for test in record.get("tests") or []:
        nodeid = test["nodeid"]
        for pattern, replacement in rename:
            nodeid = re.sub(pattern, replacement, nodeid)
        out[nodeid] = test
    return out


def _checks(test: dict[str, Any]) -> dict[tuple[str, str], str]:
    """``(check, where) -> verdict``; a check recorded twice for one subject keeps both (numbered)."""
    out: dict[tuple[str, str], str] = {}
    seen: Counter[tuple[str, str]] = Counter()
    for check in test.get("checks") or []:
        key = (str(check.get("check") or check.get("metric")), str(check.get("where") or check.get("subject")))
        seen[key] += 1
        out[(key[0], key[1] + (f" #{seen[key]}" if seen[key] > 1 else ""))] = str(check.get("verdict"))
    return out


def compare(before: Path, after: Path, rename: Sequence[tuple[str, str]] = ()) -> tuple[list[str], bool]:
    """The report's lines, and whether any verdict differs."""
    a, b = _tests(before, rename), _tests(after)
    lines: list[str] = []
    differs = False
    both = sorted(set(a) & set(b))
    lines.append(f"tests: {len(a)} before, {len(b)} after, {len(both)} in both")
    for side, only in (("before", sorted(set(a) - set(b))), ("after", sorted(set(b) - set(a)))):
        for nodeid in only:
            test = (a if side == "before" else b)[nodeid]
            lines.append(f"only {side}: {nodeid}: {test['verdict']} {test.get('message') or ''}".rstrip()[:200])
    checks_same = 0
    for nodeid in both:
        if a[nodeid]["verdict"] != b[nodeid]["verdict"]:
            differs = True
            lines.append(f"VERDICT CHANGED {nodeid}: {a[nodeid]['verdict']} -> {b[nodeid]['verdict']}")
        ca, cb = _checks(a[nodeid]), _checks(b[nodeid])
        for key in sorted(set(ca) | set(cb)):
            va, vb = ca.get(key), cb.get(key)
            if va == vb:
                checks_same += 1
                continue
            differs = True
            lines.append(f"CHECK {nodeid} {key[0]} [{key[1]}]: {va or 'absent'} -> {vb or 'absent'}")
    verdicts = Counter((a[n]["verdict"], b[n]["verdict"]) for n in both)
    lines.append(f"tests in both: {dict(verdicts)}; checks with the same verdict: {checks_same}")
    return lines, differs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rename", nargs=2, action="append", default=[], metavar=("REGEX", "REPLACEMENT"))
    args = parser.parse_args(argv)
    lines, differs = compare(args.before, args.after, [tuple(r) for r in args.rename])
    print("\n".join(lines))
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
