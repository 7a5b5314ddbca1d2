"""busbw, algbw and sizes against nccl-tests' own definitions (doc/PERFORMANCE.md and src/*.cu)."""

from __future__ import annotations

import pytest

from gpuaccept.contracts.nccl_formulas import (
    COLLECTIVES,
    algbw_gbs,
    bus_factor,
    busbw_gbs,
    effective_bytes,
    memory_per_rank,
    tuning_bytes_to_size,
)

pytestmark = pytest.mark.selftest


# nccl-tests doc/PERFORMANCE.md, "Summary": the correction factors, written out as the doc states them.
PERFORMANCE_MD = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1,
    "reduce": lambda n: 1,
    "alltoall": lambda n: (n - 1) / n,
}


@pytest.mark.parametrize("collective", sorted(PERFORMANCE_MD))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16, 1024])
def test_bus_factor_is_performance_md(collective, n):
    assert bus_factor(collective, n) == pytest.approx(PERFORMANCE_MD[collective](n))


def _nccl_tests_getbw(collective: str, count: int, typesize: int, sec: float, nranks: int) -> tuple[float, float]:
    """The ``*GetBw`` functions of nccl-tests src/{all_reduce,all_gather,reduce_scatter,alltoall,broadcast}.cu.

    ``count`` is the per-call count nccl-tests passes (``paramcount``): the whole buffer for all_reduce and
    broadcast, one rank's block for all_gather, reduce_scatter and alltoall.
    """
    if collective in ("all_reduce", "broadcast"):
        base = count * typesize / 1e9 / sec
    else:
        base = count * typesize * nranks / 1e9 / sec
    return base, base * PERFORMANCE_MD[collective](nranks)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("n", [2, 3, 8])
def test_busbw_matches_nccl_tests_getbw(collective, n):
    size = effective_bytes(collective, 4 << 30, n)  # the size column nccl-tests prints
    per_call = size // 4 if collective in ("all_reduce", "broadcast") else size // 4 // n
    sec = 0.0124813
    alg, bus = _nccl_tests_getbw(collective, per_call, 4, sec, n)
    assert algbw_gbs(size, sec) == pytest.approx(alg)
    assert busbw_gbs(collective, size, sec, n) == pytest.approx(bus)


def test_reference_row_reproduces():
    """A 2-GPU all_reduce row: 4 GiB in 12449 us is 345.01 GB/s algbw and busbw (factor 1 at n=2)."""
    assert algbw_gbs(4294967296, 12449e-6) == pytest.approx(345.0, abs=0.05)
    assert busbw_gbs("all_reduce", 4294967296, 12449e-6, 2) == pytest.approx(345.0, abs=0.05)
    assert busbw_gbs("all_reduce", 4294967296, 12449e-6, 8) == pytest.approx(345.0 * 1.75, abs=0.1)


def test_effective_bytes_round_like_get_coll_byte_count():
    # all_gather on 3 ranks: count = 1 MiB / 4 = 262144; per-rank 87381; total (87381 * 3) * 4 bytes
    assert effective_bytes("all_gather", 1 << 20, 3) == 87381 * 3 * 4
    assert effective_bytes("alltoall", 1 << 20, 3) == 87381 * 3 * 4
    assert effective_bytes("all_reduce", 1 << 20, 3) == 1 << 20
    assert effective_bytes("broadcast", 10, 2) == 8  # whole elements only


def test_memory_per_rank_counts_torch_buffers():
    assert memory_per_rank("all_reduce", 1 << 30, 8) == 1 << 30
    assert memory_per_rank("all_gather", 1 << 30, 8) == (1 << 30) + (1 << 27)
    assert memory_per_rank("alltoall", 1 << 30, 8) == 2 << 30


def test_tuning_bytes_map_back_to_nccl_tests_size():
    assert tuning_bytes_to_size("all_gather", 1 << 20, 4) == 4 << 20
    assert tuning_bytes_to_size("all_reduce", 1 << 20, 4) == 1 << 20


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor("allreduce", 2)
    with pytest.raises(ValueError, match="positive"):
        algbw_gbs(1, 0.0)
