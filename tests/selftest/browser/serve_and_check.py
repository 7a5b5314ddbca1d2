"""Serve a built Allure report on 127.0.0.1, check it and the summary page in headless Chromium.

Used by the selftests (test_report_html.py) and by CI after the acceptance run::

    python3 tests/selftest/browser/serve_and_check.py --report reports/html \\
        --record reports/runs/latest.json --summary reports/summary.html --screenshots reports/screenshots

With ``--record`` the expected test count, cluster verdict and nodes are the run record's, and the
first failed or could-not-measure test must be listed under its category (the core's, as Allure
titles it). ``check_report.js`` does the looking and blocks (and reports) any request that would
leave the machine; the screenshots it takes must not be blank (a page that draws nothing, a white or
one-colour picture, fails). Exit status: 0 all seen, 1 something missing, 2 the browser could not be
driven.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHECK = HERE / "check_report.js"
CHROMIUM = Path("/usr/bin/chromium")
#: A screenshot whose grey levels vary less than this (0-255 scale) or that is this much one colour is blank.
MIN_STDDEV = 6.0
MAX_ONE_COLOUR = 0.97


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """The report folder over HTTP on a free loopback port (as a customer's web server would serve it)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()


def blankness(png: Path) -> tuple[float, float]:
    """(grey-level standard deviation, share of the most common colour) of a screenshot."""
    from PIL import Image, ImageStat

    with Image.open(png) as image:
        rgb = image.convert("RGB")
        spread = float(ImageStat.Stat(rgb.convert("L")).stddev[0])
        colours = rgb.getcolors(maxcolors=1 << 24) or []
        top = max(count for count, _ in colours) if colours else 0
        return spread, top / (rgb.width * rgb.height)


def blank_problems(pngs: list[Path]) -> list[str]:
    problems = []
    for png in pngs:
        spread, share = blankness(png)
        if spread < MIN_STDDEV or share > MAX_ONE_COLOUR:
            problems.append(f"{png.name} looks blank (grey-level spread {spread:.1f}, {share:.0%} one colour)")
    return problems


@dataclass
class Expect:
    """What the pages must show, usually read from the run record."""

    total: int | None = None
    failed: str | None = None
    category: str | None = None
    verdict: str | None = None
    attachment: str = "checks"
    nodes: list[str] = field(default_factory=list)
    trend: int | None = None


def check(
    report: Path | None,
    expect: Expect,
    *,
    summary: Path | None = None,
    screenshots: Path | None = None,
    chromium: Path = CHROMIUM,
) -> tuple[int, dict[str, Any], str]:
    """Run check_report.js against ``report`` (served) and ``summary`` (file://); (status, seen, stderr)."""
    argv = ["node", str(CHECK), "--chromium", str(chromium)]
    if expect.verdict:
        argv += ["--verdict", expect.verdict]
    if summary is not None:
        argv += ["--summary", summary.resolve().as_uri(), "--nodes", ",".join(expect.nodes)]
    if expect.failed:
        argv += ["--failed", expect.failed, "--category", expect.category or "Threshold miss"]
        argv += ["--attachment", expect.attachment]
    if expect.trend is not None:
        argv += ["--trend", str(expect.trend)]
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
        argv += ["--screenshots", str(screenshots)]

    def run(extra: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*argv, *extra], cwd=REPO, capture_output=True, text=True, timeout=240)

    if report is not None:
        with serve(report) as url:
            done = run(["--url", url, "--total", str(expect.total)])
    else:
        done = run([])
    lines = done.stdout.strip().splitlines()
    try:
        seen = json.loads(lines[-1]) if lines else {"problems": [done.stderr[-2000:]]}
    except ValueError:
        seen = {"problems": [done.stdout[-2000:]]}
    status = done.returncode
    blank = blank_problems([Path(p) for p in seen.get("screenshots", [])])
    if blank:
        seen.setdefault("problems", []).extend(blank)
        status = status or 1
    return status, seen, done.stderr


def expectations(record_path: Path) -> Expect:
    """Count, verdict, nodes, and the first failed (or could-not-measure) test with its Allure category."""
    sys.path.insert(0, str(REPO))
    from gpuaccept.report.allure_files import CATEGORY_TITLES
    from gpuaccept.report.summary_model import cluster_verdict
    from gpuaccept.results.record import RunRecord

    record = json.loads(record_path.read_text())
    tests = record["tests"]
    bad = [t for t in tests if t["verdict"] == "failed"] + [t for t in tests if t["verdict"] == "error"]
    first = bad[0] if bad else None
    accepted, _ = cluster_verdict(RunRecord.from_dict(record))
    nodes = list((record.get("cluster") or {}).get("nodes") or [])
    return Expect(
        total=len(tests),
        failed=first["nodeid"].split("::")[-1] if first else None,
        category=CATEGORY_TITLES.get(first.get("category") or "", None) if first else None,
        verdict="ACCEPTED" if accepted else "NOT ACCEPTED",
        attachment="checks" if first and first.get("checks") else "",  # a test that judged nothing has none
        nodes=nodes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, help="folder with the Allure index.html")
    parser.add_argument("--record", type=Path, help="run record the report was built from")
    parser.add_argument("--summary", type=Path, help="the summary page to check as well (reports/summary.html)")
    parser.add_argument("--total", type=int, help="expected test count (default: the record's)")
    parser.add_argument("--failed", help="a failed test's name that must be listed (default: the record's)")
    parser.add_argument("--trend", type=int, help="runs the Allure trend must show")
    parser.add_argument("--screenshots", type=Path, help="folder for PNG screenshots of what was seen")
    args = parser.parse_args(argv)
    expect = expectations(args.record) if args.record is not None else Expect()
    expect.total = args.total if args.total is not None else expect.total
    expect.failed = args.failed or expect.failed
    expect.trend = args.trend
    if args.report is not None and expect.total is None:
        parser.error("give --total or --record")
    if args.report is None and args.summary is None:
        parser.error("give --report and/or --summary")
    status, seen, stderr = check(args.report, expect, summary=args.summary, screenshots=args.screenshots)
    print(json.dumps(seen))
    if stderr.strip():
        print(stderr.strip()[-3000:], file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
