"""Serve a built Allure report on 127.0.0.1 and check it in headless Chromium (check_report.js).

Used by the selftest (test_report_html.py) and by CI after the acceptance run::

    python3 tests/selftest/browser/serve_and_check.py --report reports/html --record reports/runs/latest.json

With ``--record`` the expected test count is the run record's, and the first failed test (if any)
must be listed under "Threshold miss"; without a failure only the count is checked. Exit status is
check_report.js's: 0 all seen, 1 something missing, 2 the browser could not be driven.
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
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CHECK = HERE / "check_report.js"
CHROMIUM = Path("/usr/bin/chromium")


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


def check(
    report: Path,
    total: int,
    failed: str | None = None,
    *,
    category: str = "Threshold miss",
    attachment: str = "metrics",
    screenshots: Path | None = None,
    chromium: Path = CHROMIUM,
) -> tuple[int, dict[str, Any], str]:
    """Run check_report.js against ``report``; return (exit status, what it saw, stderr)."""
    with serve(report) as url:
        argv = ["node", str(CHECK), "--url", url, "--total", str(total), "--chromium", str(chromium)]
        if failed:
            argv += ["--failed", failed, "--category", category, "--attachment", attachment]
        if screenshots is not None:
            screenshots.mkdir(parents=True, exist_ok=True)
            argv += ["--screenshots", str(screenshots)]
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=180)
    lines = done.stdout.strip().splitlines()
    try:
        seen = json.loads(lines[-1]) if lines else {}
    except ValueError:
        seen = {"problems": [done.stdout[-2000:]]}
    return done.returncode, seen, done.stderr


def expectations(record_path: Path) -> tuple[int, str | None]:
    """Test count and the first threshold failure's name as Allure shows it, from a run record."""
    record = json.loads(record_path.read_text())
    tests = record["tests"]
    failed = [t for t in tests if t["verdict"] == "failed" and "threshold miss" in t.get("message", "")]
    return len(tests), (failed[0]["nodeid"].split("::")[-1] if failed else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=Path("reports/html"), help="folder with index.html")
    parser.add_argument("--record", type=Path, help="run record the report was built from")
    parser.add_argument("--total", type=int, help="expected test count (default: the record's)")
    parser.add_argument("--failed", help="a failed test's name that must be listed (default: the record's)")
    parser.add_argument("--screenshots", type=Path, help="folder for PNG screenshots of what was seen")
    args = parser.parse_args(argv)
    total, failed = (args.total, args.failed)
    if args.record is not None:
        from_record = expectations(args.record)
        total = total if total is not None else from_record[0]
        failed = failed or from_record[1]
    if total is None:
        parser.error("give --total or --record")
    status, seen, stderr = check(args.report, total, failed, screenshots=args.screenshots)
    print(json.dumps(seen))
    if stderr.strip():
        print(stderr.strip()[-3000:], file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
