"""The HTML reports a customer opens: built by ``gpuaccept-report``, checked in a real headless browser.

The fake acceptance suite (``test_report_allure.FAKE_SUITE``) runs twice in a subprocess, and
``gpuaccept-report`` builds reports/html after each run (then the single-file variant) with the
pinned Allure command line. Each report is served on 127.0.0.1 (not file://, as a customer's web
server would) and Debian's Chromium, driven by playwright-core (``browser/check_report.js``), must
show: the verdict bar first, opening the acceptance summary; the run's test count; the trend over
both runs; the failed test under its category with its status and "checks" attachment. The summary
page (reports/summary.html) opens from file:// with the verdict on top and every node named. No page
may fetch anything from outside (each request is logged and blocked), and no screenshot may be blank.

Needs node, java, npm's node_modules (``npm ci``) and /usr/bin/chromium. Without them the test skips
on a developer's machine but fails in CI (``CI=true``), where .ci/run installs them.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.report.allure_page import external_loads

from .browser import serve_and_check
from .conftest import REPO
from .test_report_allure import FAILED_TEST, run_fake_suite

pytestmark = pytest.mark.selftest

CHROMIUM = Path("/usr/bin/chromium")


def _missing() -> list[str]:
    missing = [tool for tool in ("node", "java") if shutil.which(tool) is None]
    if not CHROMIUM.is_file():
        missing.append(f"{CHROMIUM} (apt-get install -y chromium)")
    for package in ("allure-commandline", "playwright-core"):
        if not (REPO / "node_modules" / package / "package.json").is_file():
            missing.append(f"node_modules/{package} (npm ci)")
    return missing


@pytest.fixture(scope="module")
def tools() -> None:
    missing = _missing()
    if missing:
        message = "HTML report check needs " + ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message + ": .ci/run must install them")
        pytest.skip(message)


@functools.lru_cache(maxsize=1)
def _report_command() -> list[str]:
    script = shutil.which("gpuaccept-report")
    return [script] if script else [sys.executable, "-m", "gpuaccept.report.html"]


@pytest.fixture(scope="module")
def suite_run(tools: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs of the fake suite in one folder, a report built after each (the second carries the trend)."""
    directory = tmp_path_factory.mktemp("html-suite")
    for attempt in (1, 2):
        run = run_fake_suite(directory)
        assert run.returncode == 1, run.output[-3000:]
        shutil.copy(run.record_path, directory / f"run{attempt}.json")
        index = _build(directory)
        assert index == directory / "reports" / "html" / "index.html"
        trend = json.loads((index.parent / "widgets" / "history-trend.json").read_text())
        assert len(trend) == attempt, trend
    expect = serve_and_check.expectations(run.record_path)
    failed = f"{FAILED_TEST}[{socket.gethostname().split('.')[0]}]"
    assert (expect.total, expect.failed, expect.category) == (4, failed, "Threshold miss")
    assert expect.verdict == "NOT ACCEPTED"
    return directory, run.record_path


def _build(root: Path, *args: str) -> Path:
    done = subprocess.run(
        [*_report_command(), "--root", str(root), *args],
        cwd=REPO,  # node_modules/.bin/allure is found from here
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    index = Path(done.stdout.strip().splitlines()[-1].removeprefix("report: "))
    assert index.is_file(), done.stdout
    return index


def _browser_check(report: Path, record: Path, shots: Path, **extra: object) -> dict[str, object]:
    expect = serve_and_check.expectations(record)
    for key, value in extra.items():
        setattr(expect, key, value)
    summary = report.parent / "summary.html"
    status, seen, stderr = serve_and_check.check(report, expect, summary=summary, screenshots=shots, chromium=CHROMIUM)
    assert status == 0, f"browser check failed ({status}): {seen} {stderr[-3000:]}"
    assert seen["external"] == [], seen["external"]
    return seen


def test_html_report_puts_the_verdict_first_and_shows_both_runs(suite_run, tmp_path):
    root, record = suite_run
    index = root / "reports" / "html" / "index.html"
    assert (index.parent / "summary.html").read_text() == (root / "reports" / "summary.html").read_text()
    seen = _browser_check(index.parent, record, tmp_path / "shots", trend=2)
    assert seen["total"] == 4 and seen["trend"] == 2
    assert str(seen["bar"]["text"]).startswith("NOT ACCEPTED ")  # type: ignore[index]
    assert seen["summaryInAllure"] == "NOT ACCEPTED"
    assert seen["failedListed"] and seen["failedStatus"] == "Failed" and seen["attachment"]
    node = socket.gethostname().split(".")[0]
    assert seen["summary"] == {
        "verdict": "NOT ACCEPTED",
        "top": seen["summary"]["top"],
        "nodes": {node: "COULD NOT MEASURE"},
    }  # type: ignore[index]
    names = {Path(p).name for p in seen["screenshots"]}  # type: ignore[union-attr]
    assert {"allure-overview.png", "summary-first-screen.png", "summary-full.png"} <= names


def test_single_file_report_for_customers(suite_run, tmp_path):
    root, record = suite_run
    index = _build(root, "--single-file")
    assert [p.name for p in index.parent.iterdir()] == ["index.html"]  # one file to send
    page = index.read_text()
    assert "googletagmanager" not in page and "gtag(" not in page
    assert 'id="gpuaccept-bar"' in page and "srcdoc=" in page  # the summary travels inside it
    seen = _browser_check(index.parent, record, tmp_path / "shots", trend=2)
    assert seen["total"] == 4 and seen["summaryInAllure"] == "NOT ACCEPTED"


def test_folder_report_loads_nothing_from_outside(suite_run):
    root, _record = suite_run
    page = (root / "reports" / "html" / "index.html").read_text()
    assert "googletagmanager" not in page and "dataLayer" not in page
    assert external_loads(page) == []


def test_a_blank_screenshot_is_caught(tmp_path):
    from PIL import Image

    Image.new("RGB", (300, 200), "white").save(tmp_path / "white.png")
    assert serve_and_check.blank_problems([tmp_path / "white.png"])[0].startswith("white.png looks blank")


def test_missing_results_say_what_to_run(tmp_path):
    done = subprocess.run(
        [*_report_command(), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 2
    assert "no Allure results" in done.stderr and "pytest -m acceptance" in done.stderr
