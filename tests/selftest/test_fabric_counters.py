"""IB counters over a window: two readings of the recorded-shape tree, counters moved in between."""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path

import pytest

from gpuaccept.fabric.counters import error_rate, port_windows
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import infiniband
from gpuaccept.thresholds.loader import Thresholds, load_thresholds
from gpuaccept.verdicts.infiniband import judge_counter_window

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "fixtures" / "sysfs" / "hgx-h100-ndr"


@functools.cache
def thresholds() -> Thresholds:
    return load_thresholds()


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    shutil.copytree(TREE, tmp_path / "sys")
    return tmp_path / "sys"


def bump(tree: Path, hca: str, counter: str, by: int) -> None:
    path = tree / "class" / "infiniband" / hca / "ports" / "1" / "counters" / counter
    path.write_text(f"{int(path.read_text()) + by}\n")


def judge(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """The window judged as test_ib_counter_window judges it (``verdicts.infiniband.judge_counter_window``):
    its failures, and the ports whose counters were missing or reset (recorded unreadable, never passed)."""
    limits = Judge(thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")
    judge_counter_window(before, after, limits, "n1")
    unreadable = []
    for w in port_windows(before, after, "InfiniBand"):
        unreadable += [f"{w.where}: {m}" for m in w.missing] + [f"{w.where}: {c} reset" for c in w.reset]
    recorded = {(r.subject, r.metric) for r in limits.results if r.verdict == "unmeasured"}
    assert recorded == {(w.where, m) for w in port_windows(before, after, "InfiniBand") for m, _ in w.unread}
    return [f"{f.where}: {f.metric} = {f.value:g}" for f in limits.failures()], unreadable


def test_quiet_window_passes_and_skips_the_ethernet_nics(tree: Path) -> None:
    before = infiniband.collect(tree)
    bump(tree, "mlx5_2", "port_rcv_data", 10**9)
    after = infiniband.collect(tree)
    windows = port_windows(before, after, "InfiniBand")
    assert [w.hca for w in windows] == [f"mlx5_{k}" for k in range(8)]  # mlx5_8/9 are Ethernet
    assert windows[2].bits_received == 32 * 10**9 and windows[2].seconds >= 0
    assert judge(before, after) == ([], [])


def test_flap_during_the_window_fails_naming_the_port(tree: Path) -> None:
    before = infiniband.collect(tree)
    bump(tree, "mlx5_5", "link_downed", 1)  # mlx5_5 already carries one from boot: only the delta counts
    bump(tree, "mlx5_6", "link_error_recovery", 2)
    failures, _ = judge(before, infiniband.collect(tree))
    assert failures == [
        "n1 HCA mlx5_5 port 1: ib_window_link_downed = 1",
        "n1 HCA mlx5_6 port 1: ib_window_link_error_recovery = 2",
    ]


def test_symbol_errors_judged_per_bit_received(tree: Path) -> None:
    before = infiniband.collect(tree)
    for hca in ("mlx5_0", "mlx5_1"):
        bump(tree, hca, "port_rcv_data", 10**12 // 32)  # 1e12 bits in the window
    bump(tree, "mlx5_0", "symbol_error", 1)  # 1e-12: at the ibdiagnet threshold, passes
    bump(tree, "mlx5_1", "symbol_error", 50)  # 5e-11: fails
    bump(tree, "mlx5_3", "port_rcv_errors", 3)  # errors with no traffic at all: an infinite rate
    failures, _ = judge(before, infiniband.collect(tree))
    assert failures == [
        "n1 HCA mlx5_1 port 1: ib_window_symbol_error_rate = 5e-11",
        "n1 HCA mlx5_3 port 1: ib_window_rcv_error_rate = inf",
    ]


def test_reset_and_saturated_counters_are_unknown_not_zero(tree: Path) -> None:
    bump(tree, "mlx5_4", "symbol_error", 7)
    before = infiniband.collect(tree)
    (tree / "class/infiniband/mlx5_4/ports/1/counters/symbol_error").write_text("0\n")  # perfquery -R
    (tree / "class/infiniband/mlx5_7/ports/1/counters/link_downed").write_text("255\n")
    time.sleep(0.01)
    failures, unreadable = judge(before, infiniband.collect(tree))
    assert "mlx5_4 port 1: symbol_error reset" in unreadable
    assert any(u.startswith("mlx5_7 port 1: counters/link_downed saturated at 255") for u in unreadable)
    assert failures == []


def test_error_rate_edges() -> None:
    assert error_rate(0, 0) == 0.0 and error_rate(1, 0) == float("inf") and error_rate(2, 10**12) == 2e-12
    assert error_rate(1, None) is None
