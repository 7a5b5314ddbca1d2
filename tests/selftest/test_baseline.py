"""--baseline: a run made worse is reported as a regression naming node and metric; an unchanged one is not.

End to end through the real plugin, dispatcher and probe (``_cpubench``, a host memcpy any CPU box can
measure), pytest in a subprocess with the local launcher, then the same on the two-node loopback Slurm
cluster with only node2 slowed down. The slow-down is the probe's selftest-only knob
``GPUACCEPT_FAULT_MEMCPY_SLOWDOWN=5`` (copies take 5x as long: -80%), far beyond the tolerance the
site file sets (50%; the best of 20 copies, timed in CPU time, was seen between 13 and 18 GB/s on this
2-core box at load 8), so the verdicts are not at the mercy of noise. The units below pin ``Baseline.compare`` itself.
"""

from __future__ import annotations

import csv
import inspect
import json
import os
import shutil
from pathlib import Path

import pytest

from gpuaccept.judging.baseline import (
    Baseline,
    BaselineError,
    fingerprint_diff,
    resolve_baseline_path,
    summarize_changes,
)
from gpuaccept.judging.judge import Judge
from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.results.comparison import comparison_of, side_by_side
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord, read_record
from gpuaccept.results.terminal import regression_lines
from gpuaccept.thresholds.loader import load_thresholds

from .conftest import run_inner, write_suite

pytestmark = pytest.mark.selftest

SITE = """
skus:
  cpu:
    limits:
      host_memcpy_gbps:
        min: 0.01
        regression_pct: 50
        source: "selftest: CPU-time memcpy, best of 20, seen 13-18 GB/s at load 8 on a 2-core box (2026-11-22); knob 5x"
"""

INNER = """
from gpuaccept.probes import specs
import pytest

pytestmark = [pytest.mark.acceptance, pytest.mark.memory]


def test_host_memcpy(node, cluster, judge):
    record = cluster.run(specs.CPUBENCH, nodes=[node], args=["--size-mib", "32", "--repeats", "20"]).one()
    judge.check("host_memcpy_gbps", record.data["memcpy_gbps"], node=node)
"""

SLOW = {"GPUACCEPT_FAULT_MEMCPY_SLOWDOWN": "5"}


def _checker_compares() -> bool:
    """Whether Judge already fails regressions itself (the lead wires Baseline.compare into it)."""
    return "baseline" in inspect.signature(Judge.__init__).parameters


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _suite(tmp_path: Path) -> Path:
    suite = write_suite(tmp_path / "suite", INNER)
    (suite / "site.yaml").write_text(SITE)
    return suite


# ---- end to end ------------------------------------------------------------------------------------


def test_slower_second_run_is_a_regression_unchanged_is_not(tmp_path, monkeypatch):
    suite = _suite(tmp_path)
    base_args = ("-m", "acceptance", "--launcher", "local", "--thresholds", "site.yaml")
    first = run_inner(suite, *base_args)
    assert first.returncode == EXIT_TEST_HOOKS and set(first.verdicts().values()) == {"passed"}, first.output[-3000:]
    node = first.record["metrics"][0]["node"]
    kept = shutil.copy(suite / "latest.json", tmp_path / "first.json")  # 'latest' moves on each run

    slow = run_inner(suite, *base_args, "--baseline", "latest", env={**os.environ, **SLOW})
    regressed = [line for line in slow.output.splitlines() if line.startswith("REGRESSED")]
    assert regressed, slow.output[-3000:]
    assert "host_memcpy_gbps fell" in regressed[0] and f" on {node} " in regressed[0], regressed
    side = _rows(suite / "record.baseline.csv")
    assert [(r["metric"], r["node"], r["status"]) for r in side] == [("host_memcpy_gbps", node, "regressed")]
    assert float(side[0]["delta_pct"]) < -50
    alluredir = suite / "reports" / "allure-results"
    (result,) = [json.loads(p.read_text()) for p in alluredir.glob("*-result.json")]
    attached = [a["name"] for a in result["attachments"]]
    assert any(name.startswith("vs baseline latest.json of ") for name in attached), attached
    assert "what changed since the baseline" in attached
    environment = (alluredir / "environment.properties").read_text()
    assert f"Regressions\\ vs\\ baseline=1\\: host_memcpy_gbps on {node}\\: regressed" in environment
    if _checker_compares():
        assert slow.verdicts() == {f"test_host_memcpy[{node}]": "failed"}, slow.output[-3000:]
        assert "regression(s) vs baseline" in slow.messages()[f"test_host_memcpy[{node}]"]
        assert result["status"] == "failed"

    same = run_inner(suite, *base_args, "--baseline", str(kept))
    assert same.returncode == EXIT_TEST_HOOKS, same.output[-3000:] + (suite / "record.baseline.csv").read_text()
    assert set(same.verdicts().values()) == {"passed"}, same.output[-3000:]
    assert not [line for line in same.output.splitlines() if line.startswith("REGRESSED")], same.output[-3000:]
    assert "no regression beyond tolerance in 1 compared metric(s)" in same.output
    assert [r["status"] for r in _rows(suite / "record.baseline.csv")] in (["within tolerance"], ["improved"])


def test_only_the_slow_node_regresses_on_slurm(tmp_path, dev_cluster):
    """Two nodes, node2 slowed: the regression names node2 and only node2."""
    suite = _suite(tmp_path)
    args = ("-m", "acceptance", "--launcher", "slurm", "--nodes", "2", "--thresholds", "site.yaml")
    first = run_inner(suite, *args, env=dev_cluster.env)
    assert first.returncode == EXIT_TEST_HOOKS and set(first.verdicts().values()) == {"passed"}, first.output[-3000:]
    slow_env = {**dev_cluster.env, **SLOW, "GPUACCEPT_FAULT_NODE": "node2"}
    slow = run_inner(suite, *args, "--baseline", "latest", env=slow_env)
    status = {r["node"]: r["status"] for r in _rows(suite / "record.baseline.csv")}
    assert status["node2"] == "regressed", slow.output[-3000:]
    assert status["node1"] in ("within tolerance", "improved"), slow.output[-3000:]
    regressed = [line for line in slow.output.splitlines() if line.startswith("REGRESSED")]
    assert len(regressed) == 1 and " on node2 " in regressed[0] and "node1" not in regressed[0], slow.output[-3000:]
    if _checker_compares():
        assert slow.verdicts() == {"test_host_memcpy[node1]": "passed", "test_host_memcpy[node2]": "failed"}


def test_missing_baseline_is_a_usage_error(tmp_path):
    suite = _suite(tmp_path)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--baseline", "latest")
    assert run.returncode == 4, run.output[-2000:]
    assert "--baseline (command line): baseline run record" in run.output and "not found" in run.output


# ---- units -----------------------------------------------------------------------------------------


def _metric(metric: str, value: float, node: str = "n1", gpu: str | None = "0", sku: str = "cpu") -> MetricResult:
    return MetricResult(
        test="t::x", metric=metric, value=value, unit="u", node=node, sku=sku, subject=gpu, subject_kind="gpu"
    )


def _baseline(tmp_path: Path, metrics: list[MetricResult], fingerprints: dict | None = None, site: str = ""):
    path = tmp_path / "base.json"
    record = {
        "schema": "gpuaccept.run/1",
        "started": "2026-11-01T00:00:00+00:00",
        "metrics": [m.to_dict() for m in metrics],
        "fingerprints": fingerprints or {},
    }
    path.write_text(json.dumps(record))
    site_path = None
    if site:
        site_path = tmp_path / "site.yaml"
        site_path.write_text(site)
    return Baseline.load(path, load_thresholds(site_path))


def _status(base: Baseline, check: MetricResult) -> str:
    return base.compare(check).status


def test_compare_follows_the_metric_direction_and_tolerance(tmp_path):
    base = _baseline(tmp_path, [_metric("host_memcpy_gbps", 100.0), _metric("swap_total_gib", 10.0, gpu=None)])
    assert _status(base, _metric("host_memcpy_gbps", 96.0)) == "within tolerance"  # -4%, the default is 5%
    slow = _metric("host_memcpy_gbps", 94.0)
    regression = base.compare(slow)
    assert regression.regressed and regression.delta_pct is not None and round(regression.delta_pct, 1) == -6.0
    assert regression.reason(slow).startswith("regressed 6.0% vs baseline base.json (100 -> 94 u, tolerance 5%)")
    assert _status(base, _metric("host_memcpy_gbps", 150.0)) == "improved"  # better is never a regression
    assert _status(base, _metric("swap_total_gib", 11.0, gpu=None)) == "regressed"  # lower is better: +10% is worse
    assert _status(base, _metric("swap_total_gib", 5.0, gpu=None)) == "improved"
    assert _status(base, _metric("host_memcpy_gbps", 50.0, gpu="1")) == "new"  # no such GPU in the baseline
    assert _status(base, _metric("host_memcpy_gbps", 50.0, node="n2")) == "new"  # nor such node


def test_per_limit_tolerance_overrides_the_default(tmp_path):
    base = _baseline(tmp_path, [_metric("host_memcpy_gbps", 100.0)], site=SITE)
    assert _status(base, _metric("host_memcpy_gbps", 55.0)) == "within tolerance"  # -45%, the limit's is 50%
    regression = base.compare(_metric("host_memcpy_gbps", 45.0))
    assert regression.regressed and regression.tolerance_pct == 50


def test_zero_baseline_and_non_numbers(tmp_path):
    base = _baseline(tmp_path, [_metric("swap_total_gib", 0.0, gpu=None), _metric("memlock_kib", -1, gpu=None)])
    more = _metric("swap_total_gib", 2.0, gpu=None)
    assert "regressed inf% vs baseline" in base.compare(more).reason(more)
    assert _status(base, _metric("memlock_kib", 64, gpu=None)) == "changed"  # better: equal is judged by its limit
    assert _status(base, _metric("swap_total_gib", float("nan"), gpu=None)) == "changed"


def test_fingerprint_diff_groups_nodes():
    def fp(driver: str) -> dict:
        return {"gpus": {"driver": driver, "count": 8, "devices": [{"name": "NVIDIA H200"}]}, "stack": {"nccl": "2.21"}}

    before = {"a17": fp("550.54"), "a18": fp("550.54"), "a19": fp("570.86"), "gone": fp("1")}
    after = {"a17": fp("570.86"), "a18": fp("570.86"), "a19": fp("570.86"), "new": fp("1")}
    changes = fingerprint_diff(before, after)
    assert [(c.node, c.field, c.before, c.after) for c in changes] == [
        ("a17", "driver", "550.54", "570.86"),
        ("a18", "driver", "550.54", "570.86"),
    ]
    assert summarize_changes(changes) == ["driver 550.54 -> 570.86 on a17, a18"]


def test_regression_lines_read_like_the_upgrade_story(tmp_path):
    metrics = [_metric("host_memcpy_gbps", 100.0, node=n, gpu=g) for n in ("a17", "a18") for g in "01"]
    base = _baseline(tmp_path, metrics)
    checks = [
        _metric("host_memcpy_gbps", 88.0, node="a17", gpu="0"),
        _metric("host_memcpy_gbps", 87.6, node="a18", gpu="1"),
        _metric("host_memcpy_gbps", 99.0, node="a18", gpu="0"),
    ]
    for check in checks:  # what the judge carries on each check
        check.extra["baseline"] = base.compare(check).to_dict()
    lines = regression_lines(checks, ["driver 550.54 -> 570.86 on a17, a18"])
    assert lines == [
        "changed: driver 550.54 -> 570.86 on a17, a18",
        "REGRESSED host_memcpy_gbps fell 12.0-12.4% on a17 (GPU 0), a18 (GPU 1) (tolerance 5%, e.g. 100 -> 88 u)",
    ]


def test_side_by_side_statuses(tmp_path):
    base = _baseline(tmp_path, [_metric("host_memcpy_gbps", 100.0, gpu=g) for g in "012"])
    checks = [
        _metric("host_memcpy_gbps", 50.0, gpu="0"),
        _metric("host_memcpy_gbps", 101.0, gpu="1"),
        _metric("host_memcpy_gbps", 1.0, gpu="7"),
    ]
    for check in checks:
        check.extra["baseline"] = base.compare(check).to_dict()
    frame = side_by_side(checks, base.not_measured(checks))
    assert dict(zip(frame["subject"], frame["status"], strict=True)) == {
        "0": "regressed",
        "1": "within tolerance",
        "7": "new",
        "2": "not measured now",
    }


def test_latest_and_bad_files(tmp_path):
    with pytest.raises(BaselineError, match="no earlier run wrote one"):
        resolve_baseline_path("latest", tmp_path)
    (tmp_path / "latest.json").write_text("{}")
    assert resolve_baseline_path("latest", tmp_path) == tmp_path / "latest.json"
    assert resolve_baseline_path(str(tmp_path), tmp_path / "elsewhere") == tmp_path / "latest.json"
    with pytest.raises(BaselineError, match="not a gpuaccept run record"):
        Baseline.load(tmp_path / "latest.json")
    (tmp_path / "empty.json").write_text(json.dumps({"schema": "gpuaccept.run/1", "metrics": []}))
    with pytest.raises(BaselineError, match="holds no metrics"):
        Baseline.load(tmp_path / "empty.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(BaselineError, match="not a readable run record"):
        Baseline.load(tmp_path / "broken.json")


def test_run1_record_subjects_are_migrated() -> None:
    """gpuaccept.run/1 named every subject in ``gpu`` (its kind in ``extra.component``, a pair by its
    arrow); run/2 records ``subject`` and ``subject_kind``, and reading a run/1 record migrates them."""
    base = {"test": "t", "metric": "m", "value": 1, "unit": "u", "node": "n1", "sku": "H100-SXM-80GB"}
    cases = [
        ({"gpu": "3 (0000:9A:00.0)"}, ("3 (0000:9A:00.0)", "gpu"), "n1 GPU 3 (0000:9A:00.0)", 3),
        ({"gpu": "0 -> 1"}, ("0 -> 1", "pair"), "n1 GPU 0 -> 1", None),
        (
            {"gpu": "mlx5_0 port 1", "extra": {"component": "HCA"}},
            ("mlx5_0 port 1", "hca"),
            "n1 HCA mlx5_0 port 1",
            None,
        ),
        ({"gpu": "driver", "extra": {"component": "field"}}, ("driver", "field"), "n1 field driver", None),
        ({"gpu": 2, "extra": {"component": "rank"}}, ("2", "rank"), "n1 rank 2", None),
        ({"gpu": None}, (None, "node"), "n1", None),
    ]
    for old, subject, where, index in cases:
        result = MetricResult.from_dict({**base, **old})
        assert (result.subject, result.subject_kind) == subject and result.where == where, old
        assert result.gpu_index == index and "component" not in result.extra
        assert MetricResult.from_dict(result.to_dict()) == result  # run/2 round trip


def test_run2_record_is_migrated_to_run3(tmp_path) -> None:
    """gpuaccept.run/2 carried ``extra.baseline`` (value and file) on a regressed check only; read back,
    it is the comparison run/3 carries on every compared check (its tolerance was not recorded)."""
    stamp = "20261101T000000Z.json"
    check = {
        "test": "t",
        "metric": "host_memcpy_gbps",
        "value": 50.0,
        "unit": "GB/s",
        "node": "n1",
        "sku": "cpu",
        "subject": "0",
        "subject_kind": "gpu",
        "verdict": "fail",
        "extra": {"regressed_only": True, "baseline": {"value": 100.0, "file": stamp}},
    }
    path = tmp_path / "run2.json"
    path.write_text(
        json.dumps(
            {
                "schema": "gpuaccept.run/2",
                "started": "2026-11-02T00:00:00+00:00",
                "tests": [{"nodeid": "t", "verdict": "failed"}],
                "metrics": [check],
            }
        )
    )
    record = read_record(path)
    assert isinstance(record, RunRecord) and record.schema == "gpuaccept.run/2" and record.counts == {"failed": 1}
    (migrated,) = record.metrics
    found = comparison_of(migrated)
    assert found is not None and found.regressed and found.delta_pct == -50.0 and found.better == "higher"
    assert found.reason(migrated) == "regressed 50.0% vs baseline 20261101T000000Z.json (100 -> 50 GB/s)"
    assert regression_lines(record.metrics) == [
        "REGRESSED host_memcpy_gbps fell 50.0% on n1 (GPU 0) (e.g. 100 -> 50 GB/s)"
    ]
    again = RunRecord.from_dict(record.to_dict())  # round trip at the current schema
    assert again.metrics == record.metrics and again.to_dict()["schema"] == "gpuaccept.run/4"
