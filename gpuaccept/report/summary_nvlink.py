"""The acceptance summary's NVLink domain panel: one row per Slurm block, its trays, clique, IMEX and busbw.

An NVL72 is accepted block by block (a block is the rack's one NVLink domain, ``verdicts/nvlink_block.py``), so a
reader asks, per block: are all its trays there, are they one clique, does IMEX hold them, and what bandwidth did
the block reach across the domain. Each of those is a check that names its block (``block`` in its extras); this
panel gathers them from the run record alone and never judges: a cell shows the check's own value and verdict,
the worst where several checks feed it (every node's IMEX view, every collective's busbw). The fabric state
is judged per node and names no block: it is put under the block the clique check measured the node in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuaccept.results.metrics import MetricResult
from gpuaccept.verdicts.imex import IMEX_METRICS

__all__ = ["BlockCell", "BlockRow", "nvlink_blocks"]

#: a check's verdicts, worst highest: what a cell standing for several checks shows
CHECK_RANK = {"fail": 3, "unmeasured": 2, "measured": 1, "unjudged": 1, "pass": 0, "info": 0}
#: the checks of a node's NVLink fabric state (verdicts/nvlink_fabric.py)
FABRIC = ("nvlink_fabric_state", "nvlink_fabric_clique")


@dataclass
class BlockCell:
    """What one cell shows: the text, the worst verdict behind it, and how many checks it stands for."""

    text: str
    verdict: str
    checks: int = 1


@dataclass
class BlockRow:
    """One Slurm block: the trays measured in it (``nodes``), its GPUs' fabric state, its clique, its IMEX domain,
    each collective's busbw."""

    block: str
    nodes: list[str] = field(default_factory=list)
    trays: BlockCell | None = None
    fabric: BlockCell | None = None
    clique: BlockCell | None = None
    imex: BlockCell | None = None
    busbw: list[BlockCell] = field(default_factory=list)


def _worse(old: BlockCell | None, new: BlockCell) -> BlockCell:
    """The cell of the worse verdict (the first kept on a tie), counting both."""
    if old is None:
        return new
    keep = new if CHECK_RANK.get(new.verdict, 0) > CHECK_RANK.get(old.verdict, 0) else old
    return BlockCell(keep.text, keep.verdict, old.checks + new.checks)


def nvlink_blocks(metrics: Iterable[MetricResult]) -> list[BlockRow]:
    """A row per block some check named, in block order; a run with no block check has none (HGX nodes)."""
    rows: dict[str, BlockRow] = {}
    fabric: list[MetricResult] = []
    for m in metrics:
        block = m.extra.get("block")
        if m.metric in FABRIC:
            fabric.append(m)
        if not block:
            continue
        row = rows.setdefault(str(block), BlockRow(str(block)))
        if m.metric == "nvlink_block_trays":
            trays = m.extra.get("trays")
            text = f"{trays} trays: {m.value}" if trays is not None else str(m.value)
            row.trays = _worse(row.trays, BlockCell(text, m.verdict))
        elif m.metric == "nvlink_block_one_clique":
            cliques = m.extra.get("cliques") or []
            nodes = m.extra.get("nodes") or []
            named = any(str(c) in str(m.value) for c in cliques)  # a split block's value names its cliques
            text = str(m.value) if named or not cliques else f"{m.value}: {', '.join(map(str, cliques))}"
            row.clique = _worse(row.clique, BlockCell(text, m.verdict))
            row.nodes = sorted({*row.nodes, *map(str, nodes)})
            if row.trays is None and nodes:  # no site declaration of its trays: the nodes measured in it
                row.trays = BlockCell(f"{len(nodes)} measured: {', '.join(map(str, nodes))}", "info")
        elif m.metric in IMEX_METRICS:
            text = "" if m.verdict == "pass" else f"{m.value} ({m.metric}, seen from {m.node})"
            row.imex = _worse(row.imex, BlockCell(text, m.verdict))
        elif m.metric == "nvlink_domain_busbw_gbps":
            gpus = m.extra.get("gpus")
            text = f"{m.extra.get('collective', '')} {m.value} GB/s at {gpus} GPUs ({m.limit_text()})"
            row.busbw.append(BlockCell(text, m.verdict))
    block_of = {node: row for row in rows.values() for node in row.nodes}
    for m in fabric:
        held = block_of.get(m.node)
        if held is not None:
            text = "" if m.verdict == "pass" else f"{m.where}: {m.value}"
            held.fabric = _worse(held.fabric, BlockCell(text, m.verdict))
    for row in rows.values():
        if row.fabric is not None and not row.fabric.text:
            row.fabric = BlockCell(f"in the fabric ({row.fabric.checks} checks)", row.fabric.verdict, row.fabric.checks)
        if row.imex is not None and not row.imex.text:  # every IMEX check passed
            row.imex = BlockCell(f"UP, all READY and C ({row.imex.checks} checks)", row.imex.verdict, row.imex.checks)
    return [rows[name] for name in sorted(rows)]
