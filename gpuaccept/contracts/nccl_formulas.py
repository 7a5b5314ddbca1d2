"""nccl-tests' size, algbw and busbw definitions, so our numbers mean what operators already know.

Source: nccl-tests ``doc/PERFORMANCE.md`` ("Summary": the bus-bandwidth correction factors) and the
``*GetCollByteCount``/``*GetBw`` functions of ``src/all_reduce.cu``, ``all_gather.cu``,
``reduce_scatter.cu``, ``alltoall.cu``, ``broadcast.cu``:

* ``size`` (the first column nccl-tests prints) is the *total* array: the all_reduce/broadcast buffer,
  the all_gather output (``sendcount * n``), the reduce_scatter input (``recvcount * n``), the alltoall
  buffer of one rank (``n`` blocks of ``count / n``). Sizes are rounded down to whole elements per rank.
* ``algbw = size / time`` in GB/s (10^9 bytes per second, not GiB).
* ``busbw = algbw * factor``: all_reduce ``2(n-1)/n``; all_gather, reduce_scatter, alltoall ``(n-1)/n``;
  broadcast and reduce ``1``.
"""

from __future__ import annotations

__all__ = [
    "COLLECTIVES",
    "NCCL_FUNC",
    "algbw_gbs",
    "bus_factor",
    "busbw_gbs",
    "effective_bytes",
    "memory_per_rank",
    "tuning_bytes_to_size",
]

#: The collectives the sweep runs, in the order it runs them.
COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")

#: NCCL's own names (as ``NCCL_DEBUG_SUBSYS=TUNING`` prints them) for each collective.
NCCL_FUNC: dict[str, str] = {
    "all_reduce": "AllReduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "alltoall": "AlltoAll",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
}

_PER_RANK_BLOCKS = frozenset({"all_gather", "reduce_scatter", "alltoall"})


def _check(collective: str, nranks: int) -> None:
    if collective not in NCCL_FUNC:
        raise ValueError(f"unknown collective {collective!r} (known: {', '.join(NCCL_FUNC)})")
    if nranks < 1:
        raise ValueError(f"nranks must be at least 1, not {nranks}")


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' correction from algorithm to bus bandwidth (PERFORMANCE.md, "Summary")."""
    _check(collective, nranks)
    if collective == "all_reduce":
        return 2.0 * (nranks - 1) / nranks
    if collective in _PER_RANK_BLOCKS:
        return (nranks - 1) / nranks
    return 1.0


def effective_bytes(collective: str, size: int, nranks: int, elem_size: int = 4) -> int:
    """The size nccl-tests really runs and prints for a requested ``size``: whole elements per rank.

    ``count = size / elem``; all_gather/reduce_scatter/alltoall move ``count / n`` elements per rank
    block, so the total becomes ``(count // n) * n`` elements (nccl-tests ``setupArgs``).
    """
    _check(collective, nranks)
    count = size // elem_size
    if collective in _PER_RANK_BLOCKS:
        count = (count // nranks) * nranks
    return count * elem_size


def algbw_gbs(size: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 B/s), as nccl-tests prints it."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, not {seconds}")
    return size / seconds / 1e9


def busbw_gbs(collective: str, size: int, seconds: float, nranks: int) -> float:
    """Bus bandwidth in GB/s: ``algbw * bus_factor`` (comparable across rank counts)."""
    return algbw_gbs(size, seconds) * bus_factor(collective, nranks)


def memory_per_rank(collective: str, size: int, nranks: int) -> int:
    """Device bytes one rank needs for ``size`` with torch.distributed's buffers (not nccl-tests').

    all_reduce and broadcast run in place (one buffer of ``size``); all_gather needs its input block and
    the whole output; reduce_scatter the whole input and its output block; alltoall input and output.
    """
    _check(collective, nranks)
    block = size // nranks
    return {
        "all_reduce": size,
        "broadcast": size,
        "reduce": size,
        "all_gather": size + block,
        "reduce_scatter": size + block,
        "alltoall": 2 * size,
    }[collective]


def tuning_bytes_to_size(collective: str, nbytes: int, nranks: int) -> int:
    """Map the byte count in NCCL's TUNING line (``count * typesize`` of the call) to nccl-tests' size.

    NCCL logs the per-rank count for all_gather (send count) and reduce_scatter (receive count), so those
    are ``n`` times smaller than the size column; the others log the whole buffer.
    """
    _check(collective, nranks)
    return nbytes * nranks if collective in ("all_gather", "reduce_scatter") else nbytes
