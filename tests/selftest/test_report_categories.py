"""Every failure category, from a real run: the record, Allure, JUnit XML and the summary agree.

A small suite has one test per category of the judging core (``gpuaccept.judging.categories``): a
figure under its floor (threshold miss), an ECC counter (hardware fault), nodes on different drivers
(drift), a probe that crashes (could not measure), and a figure that clears its floor but fell 50%
since the baseline run (regression, on the second run with ``--baseline``). Each must land in its
own Allure category (matched as Allure matches: status, then a DOTALL full match of the message),
carry the same category as a JUnit property, and be listed under it on the summary page.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.categories import CATEGORIES as CORE_CATEGORIES
from gpuaccept.report.allure_files import CATEGORY_TITLES

from .conftest import REPO, InnerRun, run_inner, write_suite
from .test_report_allure import _categories, _results
from .test_report_html import tools  # noqa: F401  (the fixture: node, java, Chromium, npm packages)

pytestmark = pytest.mark.selftest

SUITE = """
from gpuaccept.probes import specs
import os

import pytest

pytestmark = [pytest.mark.acceptance]


@pytest.mark.hygiene
def test_threshold_miss(node, judge):
    judge.check("nofile", 10, node=node)


@pytest.mark.gpu_health
def test_hardware_fault(node, judge):
    judge.check("gpu_ecc_uncorrected_volatile", 2, node=node, gpu="3 (0000:9A:00.0)")


@pytest.mark.environment
def test_drift(node, judge):
    judge.expect("versions_consistent", "550.54.15", "570.124.06", node=node)


@pytest.mark.memory
def test_regression(node, judge):
    judge.check("host_memcpy_gbps", float(os.environ["FAKE_MEMCPY_GBPS"]), node=node, gpu="0")


@pytest.mark.nccl
def test_could_not_measure(node, cluster):
    cluster.run(specs.FAULTS, nodes=[node], args=["--fault", "exit3"])


@pytest.mark.training
def test_suite_error(node, judge):
    judge.check("dev_shm_gib", {}["a bug of ours"], node=node)
"""
SITE = """
skus:
  cpu:
    limits:
      host_memcpy_gbps:
        min: 0.01
        source: "selftest: any working CPU copies faster than 0.01 GB/s"
      gpu_ecc_uncorrected_volatile:
        max: 0
        source: "selftest: NVIDIA counts any uncorrected ECC error as a fault"
"""
#: test -> the category the core must give it on the second run
EXPECTED = {
    "test_threshold_miss": "threshold miss",
    "test_hardware_fault": "hardware fault",
    "test_drift": "drift",
    "test_regression": "regression",
    "test_could_not_measure": "could not measure",
    "test_suite_error": "suite error",
}


def _run(suite: Path, gbps: float, *args: str) -> InnerRun:
    env = {**os.environ, "FAKE_MEMCPY_GBPS": str(gbps)}
    return run_inner(suite, "-m", "acceptance", "--launcher", "local", "--thresholds", "site.yaml", *args, env=env)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], InnerRun, Path]:
    suite = write_suite(tmp_path_factory.mktemp("categories"), SUITE)
    (suite / "site.yaml").write_text(SITE)
    first = _run(suite, 100.0)
    assert first.returncode == 1, first.output[-3000:]
    shutil.copy(first.record_path, suite / "baseline.json")
    first_record = first.record  # the second run writes the same record.json
    second = _run(suite, 50.0, "--baseline", "baseline.json", "--junitxml", "junit.xml")
    assert second.returncode == 1, second.output[-3000:]
    return first_record, second, suite


def _by_name(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["nodeid"].split("::")[-1].split("[")[0]: t for t in record["tests"]}


def test_every_core_category_has_an_example(runs):
    assert set(EXPECTED.values()) == set(CORE_CATEGORIES)
    first, second, _suite = runs
    assert {n: t["category"] for n, t in _by_name(second.record).items()} == EXPECTED
    assert _by_name(first)["test_regression"]["verdict"] == "passed"  # nothing to regress against yet


def test_allure_sorts_each_failure_into_its_category(runs):
    _first, _second, suite = runs
    results = _results(suite / "reports" / "allure-results")
    for name, category in EXPECTED.items():
        result = results[name]
        assert result["status"] == ("broken" if category in ("could not measure", "suite error") else "failed"), name
        assert result["statusDetails"]["message"].startswith(f"[{category}] "), result["statusDetails"]
        assert _categories(result) == [CATEGORY_TITLES[category]], (name, result["statusDetails"]["message"])


def test_junit_xml_carries_node_gpu_category_and_failed_checks(runs):
    _first, second, suite = runs
    node = second.record["metrics"][0]["node"]
    cases = {case.get("name", "").split("[")[0]: case for case in ET.parse(suite / "junit.xml").iter("testcase")}
    props = {name: {p.get("name"): p.get("value") for p in case.iter("property")} for name, case in cases.items()}
    for name, category in EXPECTED.items():
        assert props[name]["gpuaccept.category"] == category, props[name]
        assert props[name]["gpuaccept.node"] == node
    fault = props["test_hardware_fault"]
    assert fault["gpuaccept.verdict"] == "failed" and fault["gpuaccept.gpus"] == f"{node}: 3"
    ecc = f"{node} GPU 3 (0000:9A:00.0): gpu_ecc_uncorrected_volatile = 2 errors, expected <= 0"
    assert fault["gpuaccept.failed_checks"] == ecc
    assert fault["gpuaccept.metrics"] == "gpu_ecc_uncorrected_volatile"
    assert props["test_could_not_measure"]["gpuaccept.verdict"] == "error"
    assert props["test_suite_error"]["gpuaccept.verdict"] == "error"
    assert props["test_suite_error"]["gpuaccept.suite_error"].startswith("KeyError raised at test_inner.py:")
    assert "host_memcpy_gbps = 50 GB/s" in props["test_regression"]["gpuaccept.failed_checks"]
    assert all(len(value) < 2000 for p in props.values() for value in p.values())  # concise, not lists


def test_summary_lists_each_category_and_the_regression(runs):
    _first, second, suite = runs
    page = (suite / "reports" / "summary.html").read_text()
    assert '<meta name="gpuaccept-verdict" content="NOT ACCEPTED">' in page
    for category in EXPECTED.values():
        assert CATEGORY_TITLES[category] in page, category
    changes = page[page.index('id="changes"') :]
    assert "the baseline given with <code>--baseline</code>" in changes
    assert "host_memcpy_gbps" in changes and "regressed" in changes and "-50.0%" in changes
    assert json.loads(second.record_path.read_text())["status"] == "failed"


@pytest.mark.usefixtures("tools")
def test_allure_report_lists_all_six_categories(runs):
    """Allure's own matching, in the built report: each category of the core holds its one test."""
    _first, _second, suite = runs
    done = subprocess.run(
        [sys.executable, "-m", "gpuaccept.report.html", "--root", str(suite)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tree = json.loads((suite / "reports" / "html" / "data" / "categories.json").read_text())
    found = {c["name"]: _leaves(c) for c in tree["children"]}
    assert found == {CATEGORY_TITLES[category]: [name] for name, category in EXPECTED.items()}


def _leaves(node: dict[str, Any]) -> list[str]:
    if "children" not in node:
        return [str(node["name"]).split("[")[0]]
    return [leaf for child in node["children"] for leaf in _leaves(child)]
