"""Sweep sizes, memory caps, patterns and the per-group table built from a recorded H200 run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from gpuaccept.cluster import Cluster
from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_sweep import (
    cap_sizes,
    format_bytes,
    group_tables,
    parse_bytes,
    requested_sizes,
    sweep_sizes,
)
from gpuaccept.nccl import patterns
from gpuaccept.nccl.plan import op_timeout_args
from gpuaccept.probes.specs import NCCL
from gpuaccept.timelimits import TimeLimit, TimeoutRule

from .nccl_precontract import h200_records

pytestmark = pytest.mark.selftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
M, G = 1 << 20, 1 << 30


def test_default_sweep_is_1m_to_8g_in_x4_steps_and_ends_at_max():
    assert sweep_sizes(M, 8 * G, 4) == [M, 4 * M, 16 * M, 64 * M, 256 * M, G, 4 * G, 8 * G]
    assert sweep_sizes(M, 4 * G, 4)[-1] == 4 * G
    assert sweep_sizes(64 << 10, M, 2) == [64 << 10, 128 << 10, 256 << 10, 512 << 10, M]
    assert sweep_sizes(4 * G, 4 * G) == [4 * G]


@pytest.mark.parametrize(("lo", "hi", "f"), [(0, 1, 2), (2, 1, 2), (1, 2, 1)])
def test_sweep_refuses_nonsense(lo, hi, f):
    with pytest.raises(ValueError):
        sweep_sizes(lo, hi, f)


def test_cap_keeps_what_fits():
    sizes = sweep_sizes(M, 8 * G)
    assert cap_sizes(sizes, "alltoall", 2, free_bytes=16 * G)[-1] == 4 * G  # 2x8G > 0.75x16G
    assert cap_sizes(sizes, "all_reduce", 2, free_bytes=16 * G)[-1] == 8 * G
    assert cap_sizes(sizes, "all_reduce", 2, free_bytes=M) == []


def test_requested_sizes_round_per_rank():
    assert requested_sizes("all_gather", [M], 3) == [87381 * 12]
    assert requested_sizes("all_reduce", [M, M], 3) == [M]


def test_bytes_text():
    assert parse_bytes("8G") == 8 * G and parse_bytes("512K") == 512 << 10 and parse_bytes("1048576") == M
    assert format_bytes(4 * G) == "4 GiB" and format_bytes(1536 << 10) == "1.5 MiB" and format_bytes(12) == "12 B"


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 13])
def test_patterns_match_the_collective(collective, n):
    simulated = patterns.simulate(collective, n)
    for rank in range(n):
        assert simulated[rank] == patterns.expected(collective, rank, n)


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_patterns_stay_exact_in_float32(collective):
    n = patterns.MAX_RANKS
    worst = max(max(patterns.expected(collective, r, n)) for r in (0, n // 2, n - 1))
    assert worst <= 2**24  # every integer up to 2^24 is exact in float32, so sums are order-independent


def _recorded():
    return h200_records()


def test_group_table_from_recorded_h200_run():
    """2x H200, NCCL 2.28.9 (recorded 2026-11-22): nccl-tests semantics give the figures the probe printed."""
    (table,) = group_tables(_recorded())
    assert table.nodes == ("vm",) and table.ranks == (0, 1)
    assert {r.collective for r in table.rows} == set(COLLECTIVES)
    ar = table.at("all_reduce", 4 * G)
    assert ar is not None and ar.ok
    assert ar.time_us == pytest.approx(sum(ar.rank_time_us.values()) / 2)
    assert ar.busbw == pytest.approx(4 * G / (ar.time_us / 1e6) / 1e9)  # n=2: factor 1
    assert 330 < ar.busbw < 360  # the 345 GB/s nccl-tests reference, give or take run-to-run noise
    ag = table.largest("all_gather")
    assert ag.size == 8 * G and ag.busbw == pytest.approx(ag.algbw / 2)
    assert table.wrong_results() == []


def test_wrong_result_is_named():
    records = _recorded()
    records[1].data["communicator"]["results"][3] = {
        **records[1].data["communicator"]["results"][3],
        "wrong": 7,
        "first_wrong": {"row": 1, "index": 0, "got": 1.0, "want": 0.0},
    }
    (table,) = group_tables(records)
    (wrong,) = table.wrong_results()
    assert wrong[0] == records[1].data["communicator"]["results"][3]["collective"] and wrong[2] == 1 and wrong[3] == 7


def test_op_timeout_is_a_third_of_the_steps_limit_and_at_least_ten_seconds():
    """The watchdog names a hung collective before the step's limit ends the step (``nccl.plan``)."""
    assert op_timeout_args((), TimeLimit(300.0, "")) == ("--op-timeout=100.0",)
    assert op_timeout_args((), TimeLimit(12.0, "")) == ("--op-timeout=10.0",)
    assert op_timeout_args(("--op-timeout=3",), TimeLimit(300.0, "")) == ()  # a step given its own keeps it
    # the NCCL spec's: every NCCL step the cluster builds carries it, from the step's limit as --probe-timeout scales it
    step = Cluster(cast(Any, None), timeout_rule=TimeoutRule.parse("x2"))._step(NCCL, ["n1"], args=["--iters=5"])
    assert step.args == ("--iters=5", f"--op-timeout={step.timeout_s / 3}") and step.timeout_s == 600
