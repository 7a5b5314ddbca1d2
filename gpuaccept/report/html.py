"""``gpuaccept-report``: build the Allure HTML report from reports/allure-results.

The Allure command line is a Java program distributed on npm; the repository pins it in package.json
(``npm ci`` installs it under node_modules/), so every machine builds the same report. This wrapper
finds it, checks Java is there (tested with OpenJDK 17; CI installs ``default-jre-headless``),
carries the previous report's ``history/`` into the results so the trend graphs span runs, and runs
``allure generate``. ``--single-file`` makes one self-contained ``index.html`` to send to a customer.

Exit status: 0 built, 2 usage problem (no results, no Allure, no Java), else Allure's own status.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["build", "find_allure", "main"]

NPM_HINT = "run `npm ci` at the repository root (package.json pins allure-commandline), or pass --allure PATH"
JAVA_HINT = "Allure needs Java: apt-get install -y default-jre-headless (or set JAVA_HOME)"


class ReportError(Exception):
    """Something the operator must fix before a report can be built (message says what)."""


def find_allure(root: Path, explicit: str | None = None) -> Path:
    """``--allure``, ``$GPUACCEPT_ALLURE``, node_modules/.bin/allure in ``root``, the current folder, the
    checkout this package runs from (editable install), or one of their parents; else ``allure`` on PATH."""
    for candidate in (explicit, os.environ.get("GPUACCEPT_ALLURE")):
        if candidate:
            path = Path(candidate)
            if not path.is_file():
                raise ReportError(f"allure command line {path} not found")
            return path
    checkout = Path(__file__).resolve().parents[2]
    for start in (root.resolve(), Path.cwd().resolve(), checkout):
        for folder in (start, *start.parents):
            path = folder / "node_modules" / ".bin" / "allure"
            if path.is_file():
                return path
    found = shutil.which("allure")
    if found:
        return Path(found)
    raise ReportError(f"the Allure command line is not installed: {NPM_HINT}")


def _check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return
    if shutil.which("java") is None:
        raise ReportError(JAVA_HINT)


def _carry_history(results: Path, previous_report: Path) -> None:
    """Allure's trend graphs read ``history/`` from the results: take it from the last report built."""
    history = previous_report / "history"
    if history.is_dir() and not (results / "history").exists():
        shutil.copytree(history, results / "history")


def build(
    results: Path,
    output: Path,
    *,
    single_file: bool = False,
    name: str | None = None,
    allure: Path | None = None,
    root: Path | None = None,
    quiet: bool = False,
) -> Path:
    """Generate the report; return its index.html. Raises ``ReportError`` with the fix to apply."""
    if not results.is_dir() or not any(results.glob("*-result.json")):
        raise ReportError(
            f"no Allure results in {results}: run `pytest -m acceptance` first "
            "(results go to reports/allure-results, or where --alluredir says)"
        )
    binary = allure or find_allure(root or Path.cwd())
    _check_java()
    _carry_history(results, output)
    argv = [str(binary), "generate", str(results), "-o", str(output), "--clean"]
    if single_file:
        argv.append("--single-file")
    if name:
        argv += ["--name", name]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0 or not (output / "index.html").is_file():
        detail = (done.stderr or done.stdout).strip()[-2000:]
        raise subprocess.CalledProcessError(done.returncode or 1, argv, output=detail)
    if not quiet:
        print(done.stdout.strip())
    return output / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuaccept-report", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository or run folder (default: here)")
    parser.add_argument("--results", type=Path, help="Allure results (default: <root>/reports/allure-results)")
    parser.add_argument("--output", type=Path, help="report folder (default: <root>/reports/html, or html-single)")
    parser.add_argument("--single-file", action="store_true", help="one self-contained index.html to send")
    parser.add_argument("--name", default="GPU cluster acceptance", help="report title")
    parser.add_argument("--allure", help="the allure executable (default: node_modules/.bin/allure)")
    args = parser.parse_args(argv)
    results = args.results or args.root / "reports" / "allure-results"
    output = args.output or args.root / "reports" / ("html-single" if args.single_file else "html")
    try:
        index = build(
            results,
            output,
            single_file=args.single_file,
            name=args.name,
            allure=Path(args.allure) if args.allure else None,
            root=args.root,
        )
    except ReportError as exc:
        print(f"gpuaccept-report: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"gpuaccept-report: allure generate failed ({exc.returncode}):\n{exc.output}", file=sys.stderr)
        return exc.returncode
    if args.single_file:
        print("one self-contained file: send it as it is, it opens in any browser")
    else:
        print(f"a folder: view it through a web server, e.g. `node_modules/.bin/allure open {output}`")
    print(f"report: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
