"""The NVLink domain is a Slurm block (issue 56, item 4): each block holds one clique, no clique spans two
blocks, and each block holds the compute trays the site expects.

A GB200/GB300 NVL72 rack is one NVLink domain; Slurm's ``topology/block`` schedules it as one block, so a job
of a block's nodes is promised one domain. The GPUs say which domain they are in: their fabric clique, the pair
(ClusterUUID, CliqueId), read only once the fabric state is Completed (helper nvlgpu's fingerprint reading:
CliqueId alone is the placeholder 32766 across unrelated racks, meta-pytorch/torchcomms #3612). Three ways a
block can break the promise, each a named expectation of the catalogue:

* ``nvlink_block_one_clique``: the block's nodes are in more than one clique (a tray cabled to another rack's
  switches, a tray whose fabric joined another partition): a job there gets two domains;
* ``nvlink_clique_one_block``: a clique reaches nodes of two blocks (Slurm's blocks drawn wrong, or a tray
  listed in the wrong block): Slurm splits one domain, or places a job across two;
* ``nvlink_block_trays``: a block lacks trays the site bought (``domain.blocks.<name>.trays``), other than those
  the site lists as out (``out``): a rack short of trays is no NVL72, whatever its GPUs pass.

Without blocks (Slurm before 23.11, or TopologyPlugin is not topology/block) these checks do not apply:
``blocks_absent`` says so, and the domain comes from fabric state alone (nvlgpu's per-node clique checks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.nccl_sweep import GroupTable
from gpuaccept.thresholds.domain_site import DomainSite

__all__ = [
    "ONE_BLOCK",
    "ONE_CLIQUE",
    "Clique",
    "blocks_absent",
    "judge_block_cliques",
    "judge_block_trays",
    "judge_domain_busbw",
]

#: a GPU's NVLink domain: (ClusterUUID, CliqueId), as the fabric reports it once Completed
Clique = tuple[str, int]
ONE_CLIQUE = "one clique"
ONE_BLOCK = "one block"
#: how busbw at a scale without a cited figure is derived from the 72-GPU one, and why: NVLS all_reduce and
#: all_gather move each GPU's share through the NVSwitches once, so their bus bandwidth is bounded by one GPU's
#: NVLink bandwidth, not by the GPU count (NCCL's busbw definition, nccl-tests doc/PERFORMANCE.md)
DERIVED_MODEL = "flat-NVLS: busbw(N GPUs) = busbw(72) inside one NVSwitch domain (derived, not judged)"
#: the one scale a public figure exists for: a full GB200 NVL72 (coreweave/nccl-tests PR #43, NVIDIA/aicr #2784)
CITED_GPUS = 72
#: why a node's cliques are None: helper nvlgpu's fingerprint had no Completed fabric state to read them from
UNREAD = "the node's fabric clique was not read (fabric state not Completed, or NVML gave no fabric info)"


def blocks_absent(blocks: Mapping[str, Sequence[str]] | None, why: str | None) -> str | None:
    """Why the block checks do not apply ("not applicable: ..."), or None where Slurm has blocks."""
    if blocks:
        return None
    return why or "not applicable: Slurm lists no topology/block blocks"


def _spell(clique: Clique) -> str:
    return f"{clique[0]}/{clique[1]}"


def _cliques_text(where: Mapping[Clique, list[str]]) -> str:
    """``2 cliques: <uuid>/<id> on node1, node2; <uuid>/<id> on node3``."""
    parts = [f"{_spell(c)} on {', '.join(sorted(nodes))}" for c, nodes in sorted(where.items())]
    return f"{len(where)} cliques: " + "; ".join(parts)


def judge_block_cliques(
    blocks: Mapping[str, Sequence[str]],
    cliques: Mapping[str, set[Clique] | None],
    judge: JudgeLike,
) -> None:
    """Each block's measured nodes in one clique; each clique in one block. ``cliques``: node -> the set of its
    GPUs' cliques (None where unread); only nodes in it are judged (the test measured them)."""
    block_of = {node: name for name, nodes in blocks.items() for node in nodes}
    for name, nodes in sorted(blocks.items()):
        measured = [n for n in nodes if n in cliques]
        if not measured:
            continue
        unread = [n for n in measured if cliques[n] is None]
        for node in unread:
            judge.unreadable("nvlink_block_one_clique", UNREAD, node=node, block=name)
        where: dict[Clique, list[str]] = {}
        for node in measured:
            for clique in cliques[node] or ():
                where.setdefault(clique, []).append(node)
        if not where:
            continue
        observed = ONE_CLIQUE if len(where) == 1 else _cliques_text(where)
        judge.expect(
            "nvlink_block_one_clique",
            observed,
            ONE_CLIQUE,
            node=_minority(where, measured),
            block=name,
            nodes=sorted(measured),
            cliques=[_spell(c) for c in sorted(where)],
        )
    spans: dict[Clique, dict[str, list[str]]] = {}
    for node, found in cliques.items():
        for clique in found or ():
            spans.setdefault(clique, {}).setdefault(block_of.get(node, "(no block)"), []).append(node)
    for clique, by_block in sorted(spans.items()):
        if len(by_block) == 1:
            observed = ONE_BLOCK
            node = sorted(next(iter(by_block.values())))[0]
        else:
            observed = "blocks " + "; ".join(f"{b}: {', '.join(sorted(n))}" for b, n in sorted(by_block.items()))
            node = _stray(by_block)
        judge.expect(
            "nvlink_clique_one_block",
            observed,
            ONE_BLOCK,
            node=node,
            clique=_spell(clique),
            blocks=sorted(by_block),
        )


def _minority(where: Mapping[Clique, list[str]], measured: Sequence[str]) -> str:
    """The node a split block's finding names: one of the smallest clique's nodes (the odd one out), else the
    block's first node."""
    if len(where) == 1:
        return sorted(measured)[0]
    smallest = min(where.values(), key=lambda nodes: (len(nodes), sorted(nodes)))
    return sorted(smallest)[0]


def _stray(by_block: Mapping[str, list[str]]) -> str:
    """The node a clique spanning blocks is blamed on: one in the block holding the fewest of its nodes."""
    smallest = min(by_block.items(), key=lambda item: (len(item[1]), item[0]))
    return sorted(smallest[1])[0]


def judge_block_trays(
    blocks: Mapping[str, Sequence[str]],
    site: DomainSite,
    judge: JudgeLike,
    expand: Callable[[str], list[str]],
) -> None:
    """Every block the site declares holds its trays (less those listed out), and no tray it did not declare;
    ``expand`` turns the site's hostlists into names (Slurm's own expander)."""
    for name, expect in sorted(site.blocks.items()):
        wanted = _names(expect.trays, expand)
        out = _names(expect.out, expand)
        want = sorted(wanted - out)
        expected = f"all {len(want)} trays"
        if name not in blocks:
            judge.expect(
                "nvlink_block_trays",
                "absent from scontrol show topology",
                expected,
                node=want[0] if want else name,
                block=name,
                missing=want,
            )
            continue
        held = set(blocks[name])
        missing = sorted(set(want) - held)
        extra = sorted(held - wanted)
        problems = []
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if extra:
            problems.append(f"holds undeclared {', '.join(extra)}")
        observed = "; ".join(problems) if problems else expected
        judge.expect(
            "nvlink_block_trays",
            observed,
            expected,
            node=(missing or extra or want or [name])[0],
            block=name,
            trays=len(held & set(want)),
            out=sorted(out),
            missing=missing,
            undeclared=extra,
        )


def _names(hostlists: Iterable[str], expand: Callable[[str], list[str]]) -> set[str]:
    return {name for hostlist in hostlists for name in expand(hostlist)}


def judge_domain_busbw(tables: Sequence[GroupTable], judge: JudgeLike, *, block: str, node: str) -> None:
    """busbw of all_reduce and all_gather at the largest size across the block: all_reduce against
    ``nvlink_domain_busbw_gbps@<GPUs>`` where the SKU declares a floor at that scale (72 GPUs: a cited figure),
    all_gather shown (no figure for it is published),
    else shown with the floor ``DERIVED_MODEL`` derives from the 72-GPU one (marked derived, judged nothing)."""
    for table in tables:
        gpus = len(table.ranks)
        for collective in ("all_reduce", "all_gather"):
            row = table.largest(collective)
            if row is None:
                judge.unreadable("nvlink_domain_busbw_gbps", f"no {collective} row", node=node, block=block)
                continue
            subject: dict[str, object] = {"block": block, "collective": collective, "size": row.size, "gpus": gpus}
            cited = judge.declared("nvlink_domain_busbw_gbps", node, CITED_GPUS)
            if gpus != CITED_GPUS and judge.declared("nvlink_domain_busbw_gbps", node, gpus) is None:
                subject.update(model=DERIVED_MODEL, derived_floor=getattr(cited, "min", None))
            if collective == "all_gather":  # no all_gather figure across a domain is published at any scale
                judge.info("nvlink_domain_busbw_gbps", row.busbw, node=node, scale=gpus, **subject)
                continue
            judge.check("nvlink_domain_busbw_gbps", row.busbw, node=node, scale=gpus, **subject)
