"""The summary's storage panel: each filesystem's figures per node beside its contract, read from the checks."""

from __future__ import annotations

from gpuaccept.report.summary_storage import storage_columns, storage_rows
from gpuaccept.results.metrics import MetricResult


def _check(metric: str, node: str, value: float, verdict: str, minimum: float) -> MetricResult:
    result = MetricResult(
        test="t",
        metric=metric,
        value=value,
        unit="GB/s",
        node=node,
        sku="cpu",
        subject="/mnt/chkpt",
        subject_kind="fspath",
        kind="metric",
        extra={"filesystem": "chkpt"},
    )
    result.min, result.verdict = minimum, verdict
    return result


def test_a_slow_node_shows_its_own_figure_against_the_contract() -> None:
    checks = [
        _check("storage_write_gbps", "node1", 4.2, "pass", 4),
        _check("storage_write_gbps", "node2", 0.2, "fail", 4),
        _check("storage_aggregate_write_gbps", "node1", 4.4, "pass", 2.5),
        _check("storage_read_gbps", "node1", 9.0, "pass", 8),
    ]
    rows = storage_rows(checks)
    assert [(r.filesystem, r.node) for r in rows] == [("chkpt", "node1"), ("chkpt", "node2"), ("chkpt", "all nodes")]
    assert rows[1].cells["write alone"] == (0.2, ">= 4", "fail")
    assert rows[2].cells == {"write, all nodes": (4.4, ">= 2.5", "pass")}
    assert storage_columns(rows) == ["write alone", "read alone", "write, all nodes"]


def test_the_fine_tunes_figures_sit_beside_the_storage_sections() -> None:
    """The 7B's judged figures win over the small model's shown ones in the same column, whatever their value."""
    checks = [
        _check("storage_read_gbps", "node1", 1.05, "pass", 0.28),
        _check("model_weights_save_gbps", "node1", 1.33, "info", 0.5),
        _check("model_weights_save_gbps", "node1", 1.02, "pass", 0.5),
        _check("model_cold_start_gbps", "node1", 0.97, "info", 0.28),
        _check("model_cold_start_gbps", "node1", 1.18, "pass", 0.28),
    ]
    (row,) = storage_rows(checks)
    assert row.cells["merged weights save"] == (1.02, ">= 0.5", "pass")
    assert row.cells["cold start to first token"] == (1.18, ">= 0.28", "pass")
    assert storage_columns([row]) == ["read alone", "merged weights save", "cold start to first token"]
