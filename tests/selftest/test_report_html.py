"""The HTML report a customer opens: built by ``gpuaccept-report``, checked in a real headless browser.

The fake acceptance suite (``test_report_allure.FAKE_SUITE``) runs in a subprocess; ``gpuaccept-report``
builds reports/html (and the single-file variant) with the pinned Allure command line; the report is
served on 127.0.0.1 (not file://, as a customer's web server would) and Debian's Chromium, driven
by playwright-core (``browser/check_report.js``), must show the run's test count on the Overview and
the failed test under "Threshold miss", with its Failed status and metrics attachment. The Allure
page is an empty shell until its JavaScript runs, so nothing short of a browser can check this.

Needs node, java, npm's node_modules (``npm ci``) and /usr/bin/chromium. Without them the test skips
on a developer's machine but fails in CI (``CI=true``), where .ci/run installs them.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

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
def suite_run(tools: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    directory = tmp_path_factory.mktemp("html-suite")
    run = run_fake_suite(directory)
    assert run.returncode == 1, run.output[-3000:]
    failed = f"{FAILED_TEST}[{socket.gethostname().split('.')[0]}]"
    assert serve_and_check.expectations(run.record_path) == (4, failed)  # what CI derives from its record
    return directory, len(run.record["tests"])


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


def _browser_check(report: Path, total: int, shots: Path) -> dict[str, object]:
    failed = f"{FAILED_TEST}[{socket.gethostname().split('.')[0]}]"
    status, seen, stderr = serve_and_check.check(report, total, failed, screenshots=shots, chromium=CHROMIUM)
    assert status == 0, f"browser check failed ({status}): {seen} {stderr[-3000:]}"
    return seen


def test_html_report_shows_count_and_failed_test(suite_run, tmp_path):
    root, total = suite_run
    index = _build(root)
    assert index == root / "reports" / "html" / "index.html"
    seen = _browser_check(index.parent, total, tmp_path / "shots")
    assert seen["total"] == total == 4
    assert seen["failedListed"] and seen["failedStatus"] == "Failed" and seen["attachment"]


def test_single_file_report_for_customers(suite_run, tmp_path):
    root, total = suite_run
    index = _build(root, "--single-file")
    assert [p.name for p in index.parent.iterdir()] == ["index.html"]  # one file to send
    seen = _browser_check(index.parent, total, tmp_path / "shots")
    assert seen["total"] == total


def test_missing_results_say_what_to_run(tmp_path):
    done = subprocess.run(
        [*_report_command(), "--root", str(tmp_path)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2
    assert "no Allure results" in done.stderr and "pytest -m acceptance" in done.stderr
