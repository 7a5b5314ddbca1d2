"""The NVLink domains as Slurm schedules them: the blocks of ``topology/block`` (``scontrol show topology``).

A GB200/GB300 NVL72 rack is one NVLink domain; Slurm 23.11 and later model it as a block (``topology/block``,
``topology.yaml`` from 25.05 on), so a job of up to a block's nodes lands inside one domain. What each Slurm
printed (recorded under ``fixtures/slurm/<version>/show-topology*.txt``):

* 26.05.5 with blocks: one line a block, ``BlockName=b1 BlockIndex=0 Nodes=node[1-2] BlockSize=2``.
  ``BlockSize`` is the planning size (the topology's ``block_sizes``), printed for every block whatever nodes it
  holds: the trays a block holds are counted from its ``Nodes=``, never from ``BlockSize``.
* 26.05.5 without a topology plugin: nothing, exit 0.
* 22.05 (no ``topology/block``): nothing on stdout, ``scontrol: error: No topology information available`` on
  stderr, exit 0.
* ``topology/tree`` prints ``SwitchName=... Level=... Nodes=...`` lines: switches, not NVLink domains.

Without blocks the domain checks fall back to fabric state alone and the block checks say "not applicable"
(``Topology.why_no_blocks``). ``Nodes=`` is expanded by Slurm itself (``scontrol show hostnames``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gpuaccept.dispatch.slurm_cli import SlurmError, expand_hostlist, key_values, slurm_cmd

__all__ = ["Block", "Topology", "parse_topology", "read_topology"]


@dataclass(frozen=True)
class Block:
    """One ``topology/block`` block: its name, index, the nodes its ``Nodes=`` lists, and the planning size."""

    name: str
    index: int
    nodes: tuple[str, ...]
    #: ``BlockSize=``: the topology's planning size, not a count of this block's nodes
    planning_size: int | None


@dataclass(frozen=True)
class Topology:
    """What ``scontrol show topology`` said: the blocks (``kind == "block"``), or why there are none."""

    kind: Literal["block", "tree", "none"]
    blocks: tuple[Block, ...]
    #: the raw answer (what the record shows beside the checks)
    text: str

    def block_of(self, node: str) -> Block | None:
        """The block listing ``node``, or None (a node in no block, or no blocks at all)."""
        return next((b for b in self.blocks if node in b.nodes), None)

    @property
    def why_no_blocks(self) -> str | None:
        """Why the block checks do not apply (a sentence naming what Slurm said), None where blocks exist."""
        if self.kind == "block":
            return None
        if self.kind == "tree":
            return "not applicable: Slurm's topology is topology/tree (switches, not NVLink domains): no blocks"
        return (
            "not applicable: `scontrol show topology` lists no blocks (Slurm before 23.11, or TopologyPlugin is "
            "not topology/block): domains come from the GPUs' fabric state alone"
        )


def parse_topology(text: str, expand: Callable[[str], list[str]] = expand_hostlist) -> Topology:
    """``scontrol show topology``'s text as blocks; ``expand`` turns a ``Nodes=`` hostlist into names (Slurm's own
    expander by default). A line naming neither a block nor a switch is a ``SlurmError`` quoting it: a format
    this reader does not know must not read as "no blocks"."""
    blocks: list[Block] = []
    switches = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = key_values(line)
        if "BlockName" in fields:
            size = fields.get("BlockSize", "")
            index = fields.get("BlockIndex", "")
            blocks.append(
                Block(
                    name=fields["BlockName"],
                    index=int(index) if index.isdigit() else len(blocks),
                    nodes=tuple(expand(fields.get("Nodes", ""))),
                    planning_size=int(size) if size.isdigit() else None,
                )
            )
        elif "SwitchName" in fields:
            switches += 1
        else:
            raise SlurmError(f"scontrol show topology: a line naming no BlockName or SwitchName: {line.strip()!r}")
    if blocks:
        return Topology("block", tuple(blocks), text)
    return Topology("tree" if switches else "none", (), text)


def read_topology() -> Topology:
    """The cluster's topology now (one ``scontrol show topology``)."""
    return parse_topology(slurm_cmd(["scontrol", "show", "topology"]))
