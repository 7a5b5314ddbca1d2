"""What the ranks of a fine-tune launch (``finetune.py``) settle together, through object collectives.

Whether the node-wide strategies run at all: every rank learns of a GPU whose own (solo) run trained below
the SKU's floor (``below_floor``), so all of them skip DDP and FSDP together, with the reason on the record.
Where each strategy's lifecycle runs once training is done: side by side on the ranks of rank 0's node, each
on its own GPU from the files rank 0 wrote (``lifecycles``). ``dist`` is ``torch.distributed``, passed in, so
this module imports no torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["below_floor", "lifecycles"]


def below_floor(dist: Any, solo: dict[str, Any], gpu: Any, node: str, rank: int, floor: float | None) -> str:
    """Why the node-wide strategies should not run ('' when they should): a GPU whose own run trained below
    ``floor`` tokens/s. DDP and FSDP step at their slowest rank's pace: they would take that GPU's time again and
    judge every GPU of the node by it, while its own figure already fails it. All ranks agree (one gather)."""
    if not floor or dist.get_world_size() == 1:
        return ""
    mine = (rank, node, (gpu or {}).get("index"), solo.get("tokens_per_s"))
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    slow = [
        f"GPU {index} on {where} (rank {r}) at {rate:,.0f}"
        if index is not None
        else f"rank {r} on {where} at {rate:,.0f}"
        for r, where, index, rate in every
        if rate is not None and rate < floor
    ]
    if not slow:
        return ""
    return (
        f"not run: {'; '.join(slow)} tokens/s in its own run, below the floor of {floor:,.0f}: across the node "
        "this strategy would train at that pace"
    )


def lifecycles(
    dist: Any,
    rt: Any,
    pending: dict[str, dict[str, Any]],
    tokenizer: Any,
    test_ex: list[Any],
    train_ex: list[Any],
) -> dict[str, dict[str, Any]]:
    """Every strategy's lifecycle, run side by side on different ranks of rank 0's node.

    The lifecycle (reload the saved adapter onto the saved original, evaluate, time generation, compare
    with the base model) is single-process work from what rank 0 wrote; run after each strategy on
    rank 0 it kept every other GPU waiting. At the end, with all training done, strategy k's lifecycle
    runs on the k-th rank of rank 0's node (its own GPU, reading the same local files), so DDP's and
    FSDP's take the time of one. The resume from rank 0's own checkpoint (``after_training.RESUME``) and the merged
    weights saved and cold-started (``after_training.SERVED``) are jobs of the same kind, one GPU each where the
    node has one to spare. Returns, on rank 0, each job's results.
    """
    from gpuaccept.training.after_training import run_after

    local = {"rt": rt, "tokenizer": tokenizer, "test_ex": test_ex, "train_ex": train_ex}
    if rt.world == 1:
        return {strategy: run_after(strategy, job, **local) for strategy, job in pending.items()}
    nodes: list[Any] = [None] * rt.world
    dist.all_gather_object(nodes, rt.node)
    helpers = [rank for rank, name in enumerate(nodes) if name == nodes[0]]
    jobs: list[Any] = [pending if rt.rank == 0 else None]
    dist.broadcast_object_list(jobs, src=0)
    mine: dict[str, dict[str, Any]] = {}
    for index, (strategy, job) in enumerate(sorted((jobs[0] or {}).items())):
        if helpers[index % len(helpers)] == rt.rank:
            mine[strategy] = run_after(strategy, job, **local)
    gathered: list[Any] = [None] * rt.world
    dist.all_gather_object(gathered, mine)
    merged: dict[str, dict[str, Any]] = {}
    for part in gathered:
        merged.update(part or {})
    return merged if rt.rank == 0 else {}
