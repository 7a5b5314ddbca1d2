"""The acceptance summary from a run record alone: what it says, what it draws, and that it calls nothing.

Built from a synthetic H200 record (``report_records.gpu_record``: 2 nodes x 8 GPUs with matmul, HBM,
H2D/D2H and P2P figures against their floors, NCCL busbw per collective at two scales, one slow GPU,
a drift, an ECC fault and a probe that timed out) and from records on disk through the command line
(``gpuaccept-report --summary-only --record X.json``), as the lead regenerates one from a record
fetched from a GPU machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.report.allure_page import external_loads, inject_summary, strip_analytics
from gpuaccept.report.charts import gpus, nccl
from gpuaccept.report.summary import build_summary, changes_since, previous_record
from gpuaccept.report.summary_model import CLUSTER_ROW, cluster_verdict, overview
from gpuaccept.results.metrics import MetricResult
from gpuaccept.results.record import RunRecord, TestEntry
from gpuaccept.thresholds.loader import load_thresholds

from .conftest import REPO
from .report_records import NODES, gpu_record, older

pytestmark = pytest.mark.selftest
CATALOGUE = load_thresholds().metrics


def _metrics(record: dict) -> list[MetricResult]:
    return RunRecord.from_dict(record).metrics


def _typed(record: dict) -> RunRecord:
    return RunRecord.from_dict(record)


def test_verdict_counts_and_every_node():
    view = overview(_typed(gpu_record()), cluster_name="h200-east")
    assert (view.verdict, view.accepted) == ("NOT ACCEPTED", False)
    assert view.reason == "3 failed, 1 could not measure"
    assert [(n.node, n.word) for n in view.nodes] == [("gpu-a01", "could not measure"), ("gpu-a02", "failed")]
    assert "matmul_bf16_tflops GPU 3 (0000:1B:00.0) = 612 TFLOP/s, limit >= 700" in view.nodes[1].note
    assert dict(view.identity)["Cluster"] == "h200-east" and dict(view.identity)["Driver"] == "570.124.06"
    assert [f for f, _sha in view.thresholds] == ["/opt/gpuaccept/thresholds.yaml", "/etc/gpuaccept/site.yaml"]
    assert view.skipped == [("a node has no InfiniBand HCA", 1)]
    assert overview(_typed(gpu_record(slow_gpu=False))).verdict == "ACCEPTED"


def test_matrix_shows_each_failure_against_its_limit():
    view = overview(_typed(gpu_record()))
    assert view.areas == ["Environment", "GPU health", "Interconnect", "Compute", "Memory", "NCCL", "Training"]
    rows = {row.node: dict(zip(view.areas, row.cells, strict=True)) for row in view.rows}
    assert list(rows) == [*NODES, CLUSTER_ROW]
    compute = rows["gpu-a02"]["Compute"]
    assert compute is not None and compute.verdict == "failed"
    assert compute.detail == "matmul_bf16_tflops GPU 3 (0000:1B:00.0) = 612 TFLOP/s, limit >= 700"
    assert rows["gpu-a01"]["Compute"].verdict == "passed"  # type: ignore[union-attr]
    assert rows["gpu-a01"]["Training"].word == "could not measure"  # type: ignore[union-attr]
    assert rows["gpu-a02"]["Interconnect"].verdict == "passed"  # p2p passed, InfiniBand skipped: the worse wins
    assert rows[CLUSTER_ROW]["Environment"].verdict == "failed"  # type: ignore[union-attr]
    assert view.problems[0].category == "Could not measure (infrastructure)"
    assert {p.test: p.category for p in view.problems}["test_ecc[gpu-a01]"].startswith("Hardware fault")


@pytest.mark.parametrize(
    ("status", "counts", "accepted"),
    [
        ("passed", {"passed": 3, "skipped": 9}, True),
        ("passed", {"skipped": 9}, False),  # nothing passed: nothing was accepted
        ("interrupted", {"passed": 3}, False),
        ("failed", {"passed": 3, "error": 1}, False),
    ],
)
def test_cluster_verdict(status, counts, accepted):
    tests = {f"t{v}{i}": TestEntry(f"t{v}{i}", v) for v, n in counts.items() for i in range(n)}
    assert cluster_verdict(RunRecord(tests=tests, status=status))[0] is accepted


def test_heat_map_cells_are_value_over_floor():
    (panel,) = gpus.heat_panels(_metrics(gpu_record()), CATALOGUE)
    measured = {m.metric for m in _metrics(gpu_record())}  # a heat column the record has no figure for is left out
    assert [c[0] for c in panel.columns] == [m for m, _title in gpus.heat_columns(CATALOGUE) if m in measured]
    assert panel.metrics == ["matmul_bf16_tflops", "membw_tbps", "hostbw_h2d_gbps", "hostbw_d2h_gbps", "p2p_gbps"]
    assert len(panel.rows) == 16 and panel.rows[0] == ("gpu-a01", "0") and panel.rows[-1] == ("gpu-a02", "7")
    slow = panel.rows.index(("gpu-a02", "3"))
    assert panel.values[slow][0] == 612.0 and panel.ratios[slow][0] == pytest.approx(612 / 700)
    assert panel.failed == {(slow, 0)}
    p2p = panel.metrics.index("p2p_gbps")
    assert panel.values[0][p2p] == pytest.approx(365.0 - 7)  # GPU 0's slowest pair (to GPU 7)
    assert panel.floors[0] == {700.0}
    assert gpus.heatmap_png([panel]).startswith(b"\x89PNG")
    assert gpus.heat_panels([], CATALOGUE) == []


def test_a_new_heat_map_column_is_one_catalogue_entry(tmp_path):
    """A metric with a limit and a heat-map column is two lines of thresholds.yaml (its catalogue entry,
    naming the requirement it serves, and its limit) and the test that judges it: the summary reads the
    column from the catalogue."""
    text = (REPO / "thresholds.yaml").read_text()
    entry = (
        '  gpu_fp8_tflops: {unit: TFLOP/s, description: "dense FP8 matmul", display: {heatmap: "matmul FP8"}, '
        "requirements: [BMAAS09]}\n"
    )
    limit = '  gpu_fp8_tflops: {min: 1000, source: "a datasheet figure for this selftest"}\n'
    text = text.replace("\n  membw_tbps:", "\n" + entry + "  membw_tbps:", 1).replace(
        "\ndefaults:\n", "\ndefaults:\n" + limit, 1
    )
    (tmp_path / "thresholds.yaml").write_text(text)
    thresholds = load_thresholds(defaults=tmp_path / "thresholds.yaml")
    record = gpu_record()
    record["metrics"] += [
        m | {"metric": "gpu_fp8_tflops", "value": 1500.0, "min": 1000.0}
        for m in record["metrics"]
        if m["metric"] == "matmul_bf16_tflops"
    ]
    (panel,) = gpus.heat_panels(_metrics(record), thresholds.metrics)
    assert panel.columns[1] == ("gpu_fp8_tflops", "matmul FP8", "TFLOP/s")  # in the catalogue's order
    assert "matmul FP8" in build_summary(_typed(record), thresholds=thresholds)


def test_nccl_busbw_per_scale_with_floor_and_curves():
    scales = nccl.nccl_scales(_metrics(gpu_record()), CATALOGUE)
    assert [(s.title, s.multinode) for s in scales] == [("one node, 8 ranks", False), ("2 nodes together", True)]
    one, multi = scales
    assert set(one.series) == set(COLLECTIVES) and set(one.series["all_reduce"]) == set(NODES)
    assert one.floors["all_reduce"] == 360.0 and multi.floors["broadcast"] == 300.0
    assert list(multi.series["all_reduce"]) == ["gpu-a01+gpu-a02"]  # one line per group, not per node
    assert not one.curves and one.series["all_reduce"]["gpu-a01"] == [(2.0**33, 480.0)]
    curved = nccl.nccl_scales(_metrics(gpu_record(scale_curves=True)), CATALOGUE)[0]
    assert curved.curves and len(curved.series["all_reduce"]["gpu-a01"]) == 14
    assert nccl.nccl_png(curved).startswith(b"\x89PNG")


def test_changes_since_an_earlier_run():
    record = gpu_record()
    changes = changes_since(
        _typed(record), _typed(older(record)), Path("runs/20261020T100000Z.json"), None, given=False
    )
    assert changes.versions == ["driver 550.54.15 -> 570.124.06 on gpu-a01, gpu-a02"]
    matmul = next(g for g in changes.groups if g["metric"] == "matmul_bf16_tflops")
    assert matmul["status"] == "regressed" and matmul["nodes"] == list(NODES) and matmul["count"] == 16
    assert matmul["low"] == matmul["high"] == pytest.approx(-100 * (1 - 1 / 1.1), abs=0.1)
    assert changes.counts["regressed"] > 100 and not changes.given
    same = changes_since(_typed(record), _typed(record), Path("x.json"), None, given=True)
    assert same.versions == [] and same.groups == []
    assert same.counts == {"within tolerance": len(record["metrics"]) - 1}  # the drift, an expectation, not shown


def test_page_is_self_contained_and_says_it_all(tmp_path):
    record = gpu_record()
    training = tmp_path / "reports" / "training" / "8r-gpu-a01" / "ddp"
    training.mkdir(parents=True)
    (training / "history.json").write_text(
        json.dumps({"losses": [5.0 - 0.05 * i for i in range(60)], "evals": [[30, 3.6], [60, 2.1]]})
    )
    earlier = (_typed(older(record)), tmp_path / "old.json", False)
    html = build_summary(
        _typed(record),
        record_path=tmp_path / "r.json",
        reports_dir=tmp_path / "reports",
        baseline=earlier,
        cluster_name="h200-east",
    )
    assert html.index('id="verdict"') < html.index('id="matrix"') < html.index('id="identity"')
    assert "<script" not in html and external_loads(html) == []
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert html.count("data:image/png;base64,") == 1 + 2 + 1  # heat map, two NCCL scales, loss curves
    for node in NODES:
        assert re.search(rf"{node} <span class=\"chip (failed|error)\">", html), node
    assert "a" * 64 in html and "/etc/gpuaccept/site.yaml" in html  # thresholds with their sha256
    assert "driver 550.54.15 -&gt; 570.124.06 on gpu-a01, gpu-a02" in html
    assert "8r-gpu-a01 ddp" in html
    os.utime(training / "history.json", (0, 0))  # another session's curve: not this run's
    assert "8r-gpu-a01 ddp" not in build_summary(_typed(record), reports_dir=tmp_path / "reports")


def test_previous_record_is_the_newest_earlier_one(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for stamp in ("2026-10-01", "2026-11-01", "2026-12-01"):
        rec = gpu_record(started=f"{stamp}T10:00:00+00:00")
        (runs / f"{stamp}.json").write_text(json.dumps(rec))
        time.sleep(0.01)
    (runs / "latest.json").write_text((runs / "2026-12-01.json").read_text())
    (runs / "junk.json").write_text("{not json")
    current = _typed(json.loads((runs / "2026-12-01.json").read_text()))
    assert previous_record(runs / "2026-12-01.json", current) == runs / "2026-11-01.json"
    assert previous_record(runs / "latest.json", current) == runs / "2026-11-01.json"
    first = _typed(json.loads((runs / "2026-10-01.json").read_text()))
    assert previous_record(runs / "2026-10-01.json", first) is None


def test_allure_page_loses_analytics_and_gains_the_verdict_first():
    page = (
        '<html><head></head><body><div id="content"></div>'
        '<script async src="https://www.googletagmanager.com/gtag/js?id=G-X"></script>'
        "<script>window.dataLayer = window.dataLayer || []; function gtag(){dataLayer.push(arguments);}</script>"
        '<script src="app.js"></script></body></html>'
    )
    assert external_loads(page) == ["https://www.googletagmanager.com/gtag/js?id=G-X"]
    clean = strip_analytics(page)
    assert external_loads(clean) == [] and "dataLayer" not in clean and '<script src="app.js"></script>' in clean
    facts = {
        "verdict": "ACCEPTED",
        "accepted": True,
        "reason": "all passed",
        "counts": {"passed": 2},
        "cluster": "c<1>",
    }
    done = inject_summary(clean, facts, '<html><b>"quoted"</b></html>', link=None)
    assert done.index('id="gpuaccept-bar"') < done.index('id="content"')
    assert "c&lt;1&gt;" in done and 'srcdoc="&lt;html&gt;&lt;b&gt;&#34;quoted&#34;' in done
    assert "as its own page" not in done and "as its own page" in inject_summary(clean, facts, "", link="s.html")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuaccept.report.html", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_summary_only_from_a_record_file(tmp_path):
    runs = tmp_path / "reports" / "runs"
    runs.mkdir(parents=True)
    (runs / "20261020T100000Z.json").write_text(json.dumps(older(gpu_record())))
    (runs / "20261120T100000Z.json").write_text(json.dumps(gpu_record()))
    done = _cli("--summary-only", "--record", str(runs / "20261120T100000Z.json"), "--root", str(tmp_path))
    assert done.returncode == 0, done.stderr
    page = tmp_path / "reports" / "summary.html"
    assert f"acceptance summary: {page} (NOT ACCEPTED: 3 failed, 1 could not measure)" in done.stdout
    html = page.read_text()
    assert "Compared with 20261020T100000Z.json" in html and "previous run record in the same folder" in html
    assert "data:image/png;base64," in html
    bad = _cli("--summary-only", "--record", str(tmp_path / "nope.json"), "--root", str(tmp_path))
    assert bad.returncode == 2 and "run record" in bad.stderr and "nope.json" in bad.stderr
