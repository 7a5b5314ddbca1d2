"""Not run is not absent: a check that needs a missing tool is ``not run`` on the record and the summary,
and the cluster verdict is ACCEPTED only with what did not run listed."""

from __future__ import annotations

import pytest

from gpuaccept.errors import ToolMissing
from gpuaccept.judging.judge import Judge
from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.report.summary_model import cluster_verdict, overview
from gpuaccept.results.record import RunRecord, TestEntry, read_record
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.nccl import judge_nccl_tests_found

from .conftest import run_inner, write_suite

pytestmark = pytest.mark.selftest

INNER = """
import pytest

pytestmark = pytest.mark.acceptance


def test_judged_pass(node, judge):
    judge.check("dev_shm_gib", 64.0, node=node)


def test_needs_a_tool(node, judge):
    judge.check("dev_shm_gib", 64.0, node=node)
    judge.tool_missing("nccl-tests fidelity", "nccl-tests", node=node, detail="looked in /opt/nccl-tests")


def test_absent_on_this_cluster(node):
    pytest.skip("the partition declares no GPUs")
"""


@pytest.fixture(scope="module")
def inner(tmp_path_factory: pytest.TempPathFactory):
    return run_inner(write_suite(tmp_path_factory.mktemp("notrun"), INNER), "-m", "acceptance", "--launcher", "local")


def _entry(inner, name: str) -> dict:
    return next(t for t in inner.record["tests"] if t["nodeid"].split("::")[-1].startswith(name))


def test_missing_tool_is_not_run_on_the_record(inner) -> None:
    assert inner.returncode == EXIT_TEST_HOOKS, inner.output  # nothing failed, the selftest's hook set
    entry = _entry(inner, "test_needs_a_tool")
    assert entry["verdict"] == "not run"
    assert entry["not_run"] == {
        "check": "nccl-tests fidelity",
        "tool": "nccl-tests",
        "detail": "looked in /opt/nccl-tests",
    }
    assert "nccl-tests not installed" in entry["message"]
    assert _entry(inner, "test_absent_on_this_cluster")["verdict"] == "skipped"  # a declared absence stays a skip
    assert inner.record["counts"] == {"passed": 1, "not run": 1, "skipped": 1}
    assert "not run: nccl-tests fidelity \u2014 nccl-tests not installed" in inner.output  # the terminal says it


def test_verdict_lists_what_did_not_run(inner) -> None:
    record = read_record(inner.record_path)
    assert sorted(record.test_hooks) == ["GPUACCEPT_SELFTEST"]  # an inner run is a selftest: never ACCEPTED
    assert overview(record).verdict == "NOT ACCEPTED" and not record.accepted
    record.test_hooks = {}  # the verdict the tests alone call for
    accepted, reason = cluster_verdict(record)
    view = overview(record)
    node = _entry(inner, "test_needs_a_tool")["nodes"][0]
    assert accepted and view.accepted
    assert view.verdict == f"ACCEPTED (not run: nccl-tests fidelity \u2014 nccl-tests not installed ({node}))"
    assert reason.endswith(f"; not run: nccl-tests fidelity \u2014 nccl-tests not installed ({node})")


def test_plain_acceptance_reads_as_before() -> None:
    record = RunRecord(status="passed", tests={"a": TestEntry("a", "passed"), "b": TestEntry("b", "passed")})
    assert overview(record).verdict == "ACCEPTED"


def test_nccl_tests_not_installed_is_not_run_through_its_judge() -> None:
    """test_nccl_tests_fidelity records no verdict itself: the NCCL judge ends it ``not run`` where the probe
    found no nccl-tests binary, naming where it looked, and lets it go on where one was found."""
    judge = Judge(load_thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")
    judge_nccl_tests_found({"found": True, "searched": ["/opt/nccl-tests"], "runs": {}}, judge, "node1")
    with pytest.raises(ToolMissing) as caught:
        judge_nccl_tests_found({"found": False, "searched": ["/opt/nccl-tests"], "runs": {}}, judge, "node1")
    assert (caught.value.check, caught.value.tool, caught.value.nodes) == (
        "nccl-tests fidelity",
        "nccl-tests",
        ("node1",),
    )
    assert "looked in /opt/nccl-tests" in caught.value.detail
    assert judge.results == []
