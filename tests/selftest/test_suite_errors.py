"""An exception of ours is never a hardware FAILED: with every judging call raising ``KeyError`` (a bug
of the suite), each area's real acceptance test that reaches its judging ends an ERROR of category
``suite error`` naming the exception, where it was raised and the test; no test FAILS, no node is
drained, the session exits 6 (the suite could not judge, no hardware failed) and the verdict says why.

The loopback Slurm cluster of test_faults_loopback.py (2 nodes of 2 stand-in GPUs, the recorded healthy
H200 readings through GPUACCEPT_TEST_INJECT), the GPU-health, interconnect, environment, hygiene,
node-state and fabric tests. Compute, memory, NCCL and training measure on real GPUs (CUDA, NCCL): here
their probes fail before any judging call, which is "could not measure", proven elsewhere.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.verdict import EXIT_COULD_NOT_JUDGE

from ._raise_in_judge import MESSAGE
from .conftest import REPO, InnerRun, run_inner, start_cluster, stop_cluster
from .test_faults_loopback import COMMON, DESELECT
from .test_nodecheck import host_site, memlock_kib

pytestmark = pytest.mark.selftest

NODES, GPUS_PER_NODE = 2, 2
AREAS = ("test_gpu_health", "test_interconnect", "test_environment", "test_hygiene", "test_node_state", "test_fabric")


def injected_run(tmp: Path, readings: dict[str, Any], *args: str) -> Iterator[InnerRun]:
    """One inner acceptance run of ``AREAS`` on a fresh loopback cluster of ``NODES`` nodes, the probes
    reading ``readings`` through GPUACCEPT_TEST_INJECT; the cluster is stopped after."""
    cluster = start_cluster(NODES, gpus_per_node=GPUS_PER_NODE, gpu_files=tmp)
    spec = tmp / "inject.json"
    spec.write_text(json.dumps({"readings": readings}))
    site = host_site(tmp / "site.yaml")
    inner = tmp / "inner"
    inner.mkdir()
    argv = ["-m", "acceptance", "--launcher", "slurm", "--nodes", str(NODES), "--thresholds", str(site)]
    argv += ["--rootdir", str(REPO), "-k", DESELECT, *args]
    argv += [str(REPO / "tests" / "acceptance" / f"{a}.py") for a in AREAS]
    try:
        yield run_inner(inner, *argv, env={**cluster.env, "GPUACCEPT_TEST_INJECT": str(spec)}, timeout=400)
    finally:
        stop_cluster(cluster)


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InnerRun]:
    tmp = tmp_path_factory.mktemp("suite-errors")
    yield from injected_run(tmp, COMMON, "-p", "tests.selftest._raise_in_judge", "--drain-on-fail", "print")


def test_no_test_fails_and_each_area_has_a_suite_error(broken_run: InnerRun) -> None:
    tests = broken_run.record["tests"]
    tail = broken_run.output[-4000:]
    assert tests, tail
    assert [t["nodeid"] for t in tests if t["verdict"] in ("failed", "passed")] == [], tail
    ours = [t for t in tests if t["category"] == "suite error"]
    for area in AREAS:
        assert any(f"/{area}.py::" in t["nodeid"] for t in ours), (area, tail)


def test_each_suite_error_names_the_exception_where_and_test(broken_run: InnerRun) -> None:
    for test in broken_run.record["tests"]:
        if test["verdict"] != "error" or MESSAGE not in test["message"]:
            continue
        assert test["category"] == "suite error", test
        bug = test["suite_error"]
        assert bug["type"] == "KeyError" and bug["test"] == test["nodeid"], bug
        assert bug["where"].startswith("tests/selftest/_raise_in_judge.py:"), bug
        assert test["message"].startswith(f"suite error: KeyError: '{MESSAGE}' raised at {bug['where']} in "), test
        assert "not of the hardware" in test["message"]


def test_the_session_says_the_suite_could_not_judge(broken_run: InnerRun) -> None:
    record, output = broken_run.record, broken_run.output
    assert broken_run.returncode == EXIT_COULD_NOT_JUDGE, output[-3000:]
    assert "the suite could not judge" in record["verdict"] and "failed" not in record["verdict"], record["verdict"]
    assert "would drain" not in output  # a suite error never drains a node
    assert f"session verdict: {record['verdict']}" in output  # the terminal says it as the record does
    page = _summary(broken_run)
    count = sum(1 for t in record["tests"] if t["category"] == "suite error")
    assert f"<b>{count}</b> suite error (the suite could not judge)" in page and "<b>0</b> failed" in page
    assert "the suite could not judge" in page[: page.index('class="counts"')]  # the verdict's reason


def _summary(run: InnerRun) -> str:
    (path,) = re.findall(r"^acceptance summary: (\S+)", run.output, re.M)
    return Path(path).read_text()


def test_the_limit_the_site_file_loosens_is_named(broken_run: InnerRun) -> None:
    """host_site declares this host's locked-memory limit for the H200 where the packaged SKU asks for
    unlimited: the record, the terminal and the summary name it with both values."""
    if memlock_kib() == -1:
        pytest.skip("this host's locked memory is unlimited: the site file loosens nothing")
    (found,) = [x for x in broken_run.record["loosened"] if x["metric"] == "memlock_kib" and x["sku"] == "H200"]
    assert (found["bound"], found["packaged"], found["site"]) == ("equal", -1.0, float(memlock_kib())), found
    assert f"a site file loosens memlock_kib on H200: equal -1.0 (packaged) -> {float(memlock_kib())}" in (
        broken_run.output
    )
    page = _summary(broken_run)
    assert 'id="loosened"' in page and "memlock_kib on H200" in page
