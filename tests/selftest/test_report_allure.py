"""Allure results from a real acceptance run: labels, attachments, environment.properties, categories.json.

One tiny suite (``FAKE_SUITE``, also used by the HTML browser check) runs in a pytest subprocess with
the local launcher and no ``--alluredir``: the results must appear in reports/allure-results under
its rootdir, every test labelled by area, with the srun-equivalent command, the probe's raw output,
the checks table and the per-GPU plot attached, its description listing every check it judged, and
the run's environment and failure categories beside them. Allure's status and message follow the
judging core's verdict and category, and the categories' regexes sort them as the run record does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.judging.verdict import EXIT_COULD_NOT_JUDGE
from gpuaccept.report.allure_files import CATEGORIES, CATEGORY_TITLES, category_prefix
from gpuaccept.report.identity import environment
from gpuaccept.report.labels import placement, topics
from gpuaccept.results.record import RunRecord

from .conftest import InnerRun, run_inner, write_suite

pytestmark = pytest.mark.selftest

#: Four outcomes a report must tell apart: pass (with per-"GPU" values: ranks of the CPU probe stand
#: in for GPUs), a threshold miss, could-not-measure, and a pass without metrics.
FAKE_SUITE = '''
from gpuaccept.probes import specs
import pytest

pytestmark = [pytest.mark.acceptance]


@pytest.mark.hygiene
def test_node_limits(node, cluster, judge):
    """/dev/shm and open files as a job step sees them."""
    data = cluster.run(specs.HYGIENE, nodes=[node]).one().data
    judge.check("dev_shm_gib", data["dev_shm_gib"], node=node)
    judge.check("nofile", data["nofile"], node=node)


@pytest.mark.memory
def test_host_memcpy(node, cluster, judge):
    result = cluster.run(specs.CPUBENCH, nodes=[node], tasks_per_node=2, args=["--size-mib", "16"])
    for record in result.records:
        judge.check("host_memcpy_gbps", record.data["memcpy_gbps"], node=node, gpu=record.rank)


@pytest.mark.compute
def test_deliberately_failing(node, judge):
    judge.check("nofile", 10, node=node)


@pytest.mark.nccl
def test_probe_crashes(node, cluster):
    cluster.run(specs.FAULTS, nodes=[node], args=["--fault", "exit3"])
'''
FAILED_TEST = "test_deliberately_failing"
#: host_memcpy_gbps is informational in the packaged catalogue: the fake suite's site file gives it a
#: floor so that its test passes on a judged check (an informational figure alone would be an ERROR).
FAKE_SITE = """
skus:
  cpu:
    limits:
      host_memcpy_gbps:
        min: 0.01
        source: "selftest: CPU-time memcpy on a 2-core box reads 13-18 GB/s (2026-11-22); any working CPU clears 0.01"
"""


def run_fake_suite(directory: Path, *args: str) -> InnerRun:
    """The fake suite as an acceptance run on this machine (results default to reports/allure-results)."""
    suite = write_suite(directory, FAKE_SUITE)
    (suite / "site.yaml").write_text(FAKE_SITE)
    return run_inner(suite, "-m", "acceptance", "--launcher", "local", "--thresholds", "site.yaml", *args)


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[InnerRun, Path]:
    directory = tmp_path_factory.mktemp("allure-suite")
    run = run_fake_suite(directory)
    return run, directory / "reports" / "allure-results"


def _results(alluredir: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for path in alluredir.glob("*-result.json"):
        data = json.loads(path.read_text())
        out[data["name"].split("[")[0]] = data
    return out


def _labels(result: dict[str, Any], name: str) -> list[str]:
    return [label["value"] for label in result["labels"] if label["name"] == name]


def _properties(path: Path) -> dict[str, str]:
    """Java properties as Allure reads them (enough of the format for what we write)."""
    out = {}
    for line in path.read_text(encoding="ascii").splitlines():
        key, value = re.split(r"(?<!\\)=", line, maxsplit=1)
        unescape = lambda text: re.sub(r"\\u([0-9a-f]{4})", lambda m: chr(int(m.group(1), 16)), text).replace("\\", "")  # noqa: E731
        out[unescape(key)] = unescape(value)
    return out


def test_results_default_to_reports_dir_and_carry_labels(fake_run):
    run, alluredir = fake_run
    assert run.returncode == 1, run.output[-3000:]
    results = _results(alluredir)
    assert set(results) == {"test_node_limits", "test_host_memcpy", FAILED_TEST, "test_probe_crashes"}
    statuses = {name: r["status"] for name, r in results.items()}
    assert statuses == {
        "test_node_limits": "passed",
        "test_host_memcpy": "passed",
        FAILED_TEST: "failed",
        "test_probe_crashes": "broken",
    }
    node = run.record["metrics"][0]["node"]
    expected = {
        "test_node_limits": ("Environment", "OS limits and node configuration", "normal"),
        "test_host_memcpy": ("Memory", "GPU memory and host bandwidth", "critical"),
        FAILED_TEST: ("Compute", "GPU compute throughput", "critical"),
        "test_probe_crashes": ("NCCL", "Collective communication", "critical"),
    }
    for name, (epic, feature, severity) in expected.items():
        result = results[name]
        assert _labels(result, "epic") == [epic], result["labels"]
        assert _labels(result, "feature") == [feature]
        assert _labels(result, "severity") == [severity]
        assert _labels(result, "node") == [node]
    assert _labels(results["test_node_limits"], "story") == ["Node limits"]
    assert results["test_node_limits"]["description"].startswith("/dev/shm and open files")


def test_commands_raw_output_tables_and_plots_are_attached(fake_run):
    run, alluredir = fake_run
    results = _results(alluredir)
    node = run.record["metrics"][0]["node"]
    memcpy = results["test_host_memcpy"]
    names = {a["name"]: a for a in memcpy["attachments"]}
    assert {
        f"command: _cpubench on {node}",
        f"stdout: _cpubench on {node}",
        "checks",
        "plot: host_memcpy_gbps per GPU",
    } <= set(names)
    command = (alluredir / names[f"command: _cpubench on {node}"]["source"]).read_text()
    assert "gpuaccept.probes._cpubench --size-mib 16" in command
    assert "GPUACCEPT_RESULT" in (alluredir / names[f"stdout: _cpubench on {node}"]["source"]).read_text()
    assert (alluredir / names["plot: host_memcpy_gbps per GPU"]["source"]).read_bytes().startswith(b"\x89PNG")
    table = (alluredir / names["checks"]["source"]).read_text()
    assert table.count("<tr>") == 3 and "host_memcpy_gbps" in table  # header + two ranks
    assert "selftest: CPU-time memcpy" in table  # the limit's source is shown with the value
    assert {"name": "GPUs", "value": f"'{node} GPU 0, {node} GPU 1'", "excluded": True} in memcpy["parameters"]
    failed = {a["name"]: a for a in results[FAILED_TEST]["attachments"]}
    assert "#fdecea" in (alluredir / failed["checks"]["source"]).read_text()  # the failed row is marked
    broken = {a["name"] for a in results["test_probe_crashes"]["attachments"]}
    assert f"command: _faults on {node}" in broken


def test_description_lists_what_each_test_verified(fake_run):
    _run, alluredir = fake_run
    results = _results(alluredir)
    limits = results["test_node_limits"]["description"]
    assert limits.startswith("/dev/shm and open files as a job step sees them.")
    assert "Checks judged: 2 passed, 0 failed" in limits
    assert "dev_shm_gib on" in limits and "nofile on" in limits and "Source: " in limits
    failing = results[FAILED_TEST]["description"]
    assert "0 passed, 1 failed" in failing and "**FAIL** · nofile" in failing and "expected &gt;= 4096" in failing
    assert "No check was recorded" in results["test_probe_crashes"]["description"]


def test_environment_properties(fake_run):
    run, alluredir = fake_run
    props = _properties(alluredir / "environment.properties")
    record = run.record
    assert props["Thresholds digest"] == record["thresholds"]["digest"]
    assert props["Launcher"] == "local"
    assert props["Nodes"] == f"1: {record['metrics'][0]['node']}"
    assert props["GPU model"] == "no GPU"
    assert props["Suite version"].startswith("gpuaccept ")
    assert props["Tests"] == "1 error, 1 failed, 2 passed"
    assert props["torch"] == record["fingerprints"][record["metrics"][0]["node"]]["stack"]["torch"]
    for key in ("Cluster", "Driver", "CUDA", "NCCL", "Started", "Run record"):
        assert props[key], key


def test_categories_sort_the_real_messages(fake_run):
    run, alluredir = fake_run
    assert json.loads((alluredir / "categories.json").read_text()) == CATEGORIES
    results = _results(alluredir)
    assert _categories(results[FAILED_TEST]) == ["Threshold miss"]
    assert _categories(results["test_probe_crashes"]) == ["Could not measure (infrastructure)"]
    assert _categories(results["test_host_memcpy"]) == []
    message = results[FAILED_TEST]["statusDetails"]["message"]
    assert message.startswith("[threshold miss] 1 failed check(s):"), message
    assert results["test_probe_crashes"]["statusDetails"]["message"].startswith("[could not measure] ")
    # the record and Allure say the same thing
    categories = {t["nodeid"].split("::")[-1].split("[")[0]: t["category"] for t in run.record["tests"]}
    assert categories[FAILED_TEST] == "threshold miss" and categories["test_probe_crashes"] == "could not measure"


def _categories(result: dict[str, Any]) -> list[str]:
    """Allure's own matching: status in matchedStatuses and a full DOTALL match of the message."""
    message = (result.get("statusDetails") or {}).get("message") or ""
    return _match(result["status"], message)


def _match(status: str, message: str) -> list[str]:
    out = []
    for category in CATEGORIES:
        if status not in category["matchedStatuses"]:
            continue
        regex = category.get("messageRegex")
        if regex is None or re.fullmatch(regex, message, re.DOTALL):
            out.append(category["name"])
    return out


@pytest.mark.parametrize("category", ["threshold miss", "hardware fault", "drift", "regression"])
def test_each_core_category_lands_in_exactly_its_allure_category(category):
    message = category_prefix(category) + "1 threshold miss(es):\n  a17 GPU 0: ecc = 2 (limit <= 0; drift? regressed)"
    assert _match("failed", message) == [CATEGORY_TITLES[category]]


def test_unsorted_failures_and_broken_tests():
    assert _match("failed", "AssertionError: something a site plugin raised") == ["Other failed check"]
    assert _match("broken", "[could not measure] ProbeTimeout: probe nccl on a17: no result within 300 s") == [
        "Could not measure (infrastructure)"
    ]
    assert _match("broken", "any crash") == ["Could not measure (infrastructure)"]
    assert _match("broken", "[suite error] suite error: KeyError: 'x' raised at gpuaccept/judging/judge.py:9") == [
        CATEGORY_TITLES["suite error"]
    ]


def test_placement_follows_the_plugin_markers():
    categories = topics()
    assert "acceptance" not in categories and "multinode" not in categories
    assert placement(["multinode", "nccl", "acceptance"], "test_all_reduce", categories).epic == "NCCL"
    assert placement(["slurm"], "test_gpu_isolation", categories).severity == "blocker"
    assert placement(["acceptance"], "test_misc", categories).epic == "Other"
    assert placement(["power"], "test_x", {"power": "Power draw"}).epic == "Power"


def test_environment_escapes_for_java():
    values = environment(
        RunRecord(cluster={"name": "a=b: c", "launcher": "slurm"}),
        None,
        baseline="x.json",
        changes=["driver 550 -> 570 on a17"],
        regressions=[],
    )
    assert values["Cluster"] == "a=b: c"
    assert values["Changes vs baseline"] == "driver 550 -> 570 on a17"
    assert values["Regressions vs baseline"] == "0"


def test_no_default_alluredir_outside_acceptance_runs(tmp_path):
    run = run_inner(write_suite(tmp_path, "def test_nothing():\n    pass\n"), "--launcher", "local")
    assert run.returncode == 0, run.output[-2000:]
    assert not (tmp_path / "reports" / "allure-results").exists()


def test_an_explicit_alluredir_wins(tmp_path):
    target = tmp_path / "elsewhere"
    source = "import pytest\n\n@pytest.mark.acceptance\ndef test_a(cluster):\n    assert cluster.nodes\n"
    suite = write_suite(tmp_path / "suite", source)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--alluredir", str(target))
    # an acceptance test that judged nothing does not pass, whatever its body asserted
    assert run.returncode == EXIT_COULD_NOT_JUDGE, run.output[-2000:]  # errors only: the suite could not judge
    assert "nothing was judged, so nothing can pass" in run.output, run.output[-2000:]
    assert list(target.glob("*-result.json")) and (target / "categories.json").is_file()
    assert not (suite / "reports" / "allure-results").exists()
