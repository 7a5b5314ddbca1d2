"""``gpuaccept-report``: the acceptance summary and the Allure HTML report of a run.

The Allure command line is a Java program distributed on npm; the repository pins it in package.json
(``npm ci`` installs it under node_modules/), so every machine builds the same report. This wrapper
finds it, checks Java is there (tested with OpenJDK 17; CI installs ``default-jre-headless``),
carries the previous report's ``history/`` into the results so the trend graphs span runs, and runs
``allure generate`` with Allure's analytics off. ``--single-file`` makes one self-contained
``index.html`` to send to a customer.

``--sign-key KEY`` (or ``GPUACCEPT_SIGN_KEY``) signs the summary it builds, which then shows the key's
fingerprint, and the run record when that has no signature yet; a signed record that was changed since
is refused, never signed over (``gpuaccept.signing``; ``gpuaccept-verify`` checks both).

Then the acceptance summary (``reports/summary.html``, see ``gpuaccept.report.summary``) is made the
first thing of the report: a verdict bar on top of every page that opens the summary, and the page is
checked to load nothing from outside. ``--summary-only --record RUN.json`` builds just the summary
from a run record (one fetched from another machine, say), without Allure or Java.

Exit status: 0 built, 2 usage problem (no results, no record, no Allure, no Java), else Allure's own.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuaccept.report.allure_page import ANALYTICS_ENV, PageError, external_loads, inject_summary, strip_analytics
from gpuaccept.signing.files import check_file, sha256_of, sign_file
from gpuaccept.signing.keys import KeyUnusable, SigningKey, load_signing_key

__all__ = ["build", "build_summary_file", "find_allure", "main", "record_for", "with_summary"]

NPM_HINT = "run `npm ci` at the repository root (package.json pins allure-commandline), or pass --allure PATH"
JAVA_HINT = "Allure needs Java: apt-get install -y default-jre-headless (or set JAVA_HOME)"


class ReportError(Exception):
    """Something the operator must fix before a report can be built (message says what)."""


def find_allure(root: Path) -> Path:
    """``$GPUACCEPT_ALLURE``, node_modules/.bin/allure in ``root``, the current folder, the checkout this
    package runs from (editable install), or one of their parents; else ``allure`` on PATH (``--allure``
    names the binary itself: ``build``'s ``allure``)."""
    candidate = os.environ.get("GPUACCEPT_ALLURE")
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


def require_results(results: Path) -> None:
    if not results.is_dir() or not any(results.glob("*-result.json")):
        raise ReportError(
            f"no Allure results in {results}: run `pytest -m acceptance` first "
            "(results go to reports/allure-results, or where --alluredir says)"
        )


def build(
    results: Path,
    output: Path,
    *,
    single_file: bool = False,
    name: str | None = None,
    allure: Path | None = None,
    root: Path | None = None,
) -> Path:
    """Generate the report; return its index.html. Raises ``ReportError`` with the fix to apply."""
    require_results(results)
    binary = allure or find_allure(root or Path.cwd())
    _check_java()
    _carry_history(results, output)
    argv = [str(binary), "generate", str(results), "-o", str(output), "--clean"]
    if single_file:
        argv.append("--single-file")
    if name:
        argv += ["--name", name]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **ANALYTICS_ENV})
    if done.returncode != 0 or not (output / "index.html").is_file():
        detail = (done.stderr or done.stdout).strip()[-2000:]
        raise subprocess.CalledProcessError(done.returncode or 1, argv, output=detail)
    print(done.stdout.strip())
    index = output / "index.html"
    index.write_text(strip_analytics(index.read_text(encoding="utf-8")), encoding="utf-8")
    return index


def record_for(results: Path, root: Path) -> Path:
    """The run record of these results: the one environment.properties names, else reports/runs/latest.json."""
    from gpuaccept.report.allure_files import read_environment

    named = read_environment(results / "environment.properties").get("Run record")
    if named and Path(named).is_file():
        return Path(named)
    return root / "reports" / "runs" / "latest.json"


def _reports_dir(record: Path, root: Path) -> Path:
    """reports/ of the run: the record's grandparent for reports/runs/X.json, else <root>/reports."""
    return record.parent.parent if record.parent.name == "runs" else root / "reports"


_STARTED = re.compile(r'<meta name="gpuaccept-record-started" content="([^"]*)">')


def _sign_record(record: Path, signer: SigningKey) -> None:
    """Sign a record that has no signature yet; leave a signed one that is as signed (by whichever key);
    refuse one changed after it was signed, or whose signature does not verify: no summary of it is signed."""
    found = check_file(record, "record")
    if found.unsigned:
        sign_file(record, signer, "record")
    elif not found.ok:
        raise ReportError(f"{found.problem}: no summary of it is signed")


def _reusable(target: Path, record: Path, signer: SigningKey | None) -> bool:
    """Whether the page the session wrote can stand for this record as it is: with a key, only a page
    this key signed, unchanged since and naming this record (a page edited since is drawn again, never
    signed over)."""
    if signer is None:
        return True
    found = check_file(target, "summary", signer.public)
    return found.ok and found.signed is not None and found.signed.rendered_from == sha256_of(record)


def build_summary_file(
    record_path: Path,
    target: Path,
    *,
    root: Path,
    baseline: Path | None = None,
    reuse: bool = True,
    environment: dict[str, str] | None = None,
    signer: SigningKey | None = None,
) -> tuple[str, dict[str, Any]]:
    """Write (or reuse, when the session already wrote it for this very record) the summary page.

    Returns its HTML and what the Allure bar says about the run. Reuse keeps what only the session
    knew (Slurm's cluster name, the session's --baseline); a different record or a --baseline here
    rebuilds the page from the record. ``environment`` is the results' environment.properties: when
    it is this record's, its cluster name (asked of Slurm during the session) is used. ``signer`` signs
    the page (and the record, when unsigned: ``_sign_record``); the page shows its fingerprint.
    """
    from gpuaccept.report.summary import (
        SummaryError,
        build_summary,
        load_record,
        previous_record,
        record_thresholds,
        write_summary,
    )
    from gpuaccept.report.summary_model import overview

    try:
        record = load_record(record_path)
        env = environment or {}
        name = env.get("Cluster") if env.get("Started") == record.started.isoformat() else None
        view = overview(record, cluster_name=name)
        html = target.read_text(encoding="utf-8") if reuse and baseline is None and target.is_file() else ""
        match = _STARTED.search(html)
        if signer is not None:
            _sign_record(record_path, signer)
        if match is None or match.group(1) != record.started.isoformat() or not _reusable(target, record_path, signer):
            earlier = baseline or previous_record(record_path, record)
            html = build_summary(
                record,
                record_path=record_path,
                reports_dir=_reports_dir(record_path, root),
                baseline=None if earlier is None else (load_record(earlier), earlier, False),
                thresholds=record_thresholds(record),
                cluster_name=name,
                signed_by=signer.public.fingerprint if signer is not None else None,
            )
            write_summary(target, html, signer=signer, rendered_from=record_path)
    except SummaryError as exc:
        raise ReportError(str(exc)) from None
    cluster = dict(view.identity).get("Cluster", "the cluster")
    facts = {
        "verdict": view.verdict,
        "accepted": view.accepted,
        "reason": view.reason,
        "counts": view.counts,
        "cluster": cluster,
    }
    return html, facts


def with_summary(index: Path, summary_html: str, facts: dict[str, Any], *, single_file: bool) -> None:
    """Put the verdict bar and the summary first in the report; refuse a page that would call out."""
    page = inject_summary(
        index.read_text(encoding="utf-8"), facts, summary_html, link=None if single_file else "summary.html"
    )
    if not single_file:
        (index.parent / "summary.html").write_text(summary_html, encoding="utf-8")
    outside = external_loads(page)
    if outside:
        raise ReportError(f"{index} would load from outside when opened: {', '.join(outside[:5])}")
    index.write_text(page, encoding="utf-8")


def _signer(path: Path | None) -> SigningKey | None:
    if path is None:
        return None
    try:
        return load_signing_key(path)
    except KeyUnusable as exc:
        raise ReportError(f"--sign-key {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuaccept-report", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="repository or run folder (default: here)")
    parser.add_argument("--results", type=Path, help="Allure results (default: <root>/reports/allure-results)")
    parser.add_argument("--output", type=Path, help="report folder (default: <root>/reports/html, or html-single)")
    parser.add_argument("--single-file", action="store_true", help="one self-contained index.html to send")
    parser.add_argument("--name", default="GPU cluster acceptance", help="report title")
    parser.add_argument("--allure", help="the allure executable (default: node_modules/.bin/allure)")
    parser.add_argument(
        "--record", type=Path, help="run record (default: the results' own, else reports/runs/latest.json)"
    )
    parser.add_argument(
        "--baseline", type=Path, help="earlier run record to show changes against (default: the previous)"
    )
    parser.add_argument("--summary", type=Path, help="where the summary goes (default: <reports>/summary.html)")
    parser.add_argument("--summary-only", action="store_true", help="build only the summary from --record (no Allure)")
    parser.add_argument(
        "--sign-key",
        type=Path,
        default=os.environ.get("GPUACCEPT_SIGN_KEY") or None,
        help="Ed25519 private key that signs the summary (and an unsigned record) [env GPUACCEPT_SIGN_KEY]",
    )
    args = parser.parse_args(argv)
    results = args.results or args.root / "reports" / "allure-results"
    record = args.record or record_for(results, args.root)
    summary = args.summary or _reports_dir(record, args.root) / "summary.html"
    output = args.output or args.root / "reports" / ("html-single" if args.single_file else "html")
    try:
        signer = _signer(args.sign_key)
        if not args.summary_only:
            require_results(results)
        if not record.is_file() and not args.summary_only:
            raise ReportError(f"run record {record} not found: give --record (the summary is built from it)")
        from gpuaccept.report.allure_files import read_environment

        env = read_environment(results / "environment.properties")
        html, facts = build_summary_file(
            record,
            summary,
            root=args.root,
            baseline=args.baseline,
            reuse=not args.summary_only,
            environment=env,
            signer=signer,
        )
        print(f"acceptance summary: {summary} ({facts['verdict']}: {facts['reason']})")
        if signer is not None:
            print(f"signed by {signer.public.fingerprint}: gpuaccept-verify --record {record} --summary {summary}")
        if args.summary_only:
            return 0
        index = build(
            results,
            output,
            single_file=args.single_file,
            name=args.name,
            allure=Path(args.allure) if args.allure else None,
            root=args.root,
        )
        with_summary(index, html, facts, single_file=args.single_file)
    except (ReportError, PageError) as exc:
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
