"""What each rank puts into a collective and what it must get back: the numerical check.

Buffers are viewed as ``n`` equal rows (one per rank's block, the granularity collectives move data
in). Each row is filled with one small integer that depends on the rank and the row, so a block
delivered to the wrong rank or offset, a missing contribution, a stale buffer or a flipped bit all
change the value. Every value and every partial sum stays an integer below 2^24, so float32 sums are
exact in any order (ring, tree, NVLS) for up to 4096 ranks: a result is either exactly right or wrong.

``inputs(collective, rank, n)`` gives the row values of the send buffer, ``expected(...)`` those of
the receive buffer; ``simulate`` computes the collective on plain lists so the selftests can prove
the two agree.
"""

from __future__ import annotations

__all__ = ["MAX_RANKS", "ROOT", "UNSET", "expected", "inputs", "simulate"]

MAX_RANKS = 4096
ROOT = 0
#: What non-root ranks hold before a broadcast (and receive buffers before any collective).
UNSET = -1.0


def _check(n: int, rank: int) -> None:
    if not 1 <= n <= MAX_RANKS:
        raise ValueError(f"{n} ranks: exact float32 checks hold for 1..{MAX_RANKS} ranks")
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in 0..{n - 1}")


def inputs(collective: str, rank: int, n: int) -> list[float]:
    """Row values of ``rank``'s input buffer (all_gather's input is one row: its own block)."""
    _check(n, rank)
    if collective in ("all_reduce", "reduce_scatter"):
        return [float(rank + 1 + row % 4) for row in range(n)]
    if collective == "all_gather":
        return [float(rank + 1)]
    if collective == "alltoall":
        return [float(rank * n + row + 1) for row in range(n)]
    if collective == "broadcast":
        return [float(row + 1) for row in range(n)] if rank == ROOT else [UNSET] * n
    raise ValueError(f"unknown collective {collective!r}")


def expected(collective: str, rank: int, n: int) -> list[float]:
    """Row values ``rank`` must hold after the collective (sum for reductions)."""
    _check(n, rank)
    total = n * (n + 1) // 2
    if collective == "all_reduce":
        return [float(total + n * (row % 4)) for row in range(n)]
    if collective == "reduce_scatter":
        return [float(total + n * (rank % 4))]
    if collective == "all_gather":
        return [float(row + 1) for row in range(n)]
    if collective == "alltoall":
        return [float(row * n + rank + 1) for row in range(n)]
    if collective == "broadcast":
        return [float(row + 1) for row in range(n)]
    raise ValueError(f"unknown collective {collective!r}")


def simulate(collective: str, n: int) -> list[list[float]]:
    """Each rank's output rows computed from ``inputs`` by the collective's definition (for selftests)."""
    ins = [inputs(collective, r, n) for r in range(n)]
    if collective == "all_reduce":
        return [[sum(ins[r][row] for r in range(n)) for row in range(n)] for _ in range(n)]
    if collective == "reduce_scatter":
        return [[sum(ins[r][rank] for r in range(n))] for rank in range(n)]
    if collective == "all_gather":
        return [[ins[r][0] for r in range(n)] for _ in range(n)]
    if collective == "alltoall":
        return [[ins[src][rank] for src in range(n)] for rank in range(n)]
    if collective == "broadcast":
        return [list(ins[ROOT]) for _ in range(n)]
    raise ValueError(f"unknown collective {collective!r}")
