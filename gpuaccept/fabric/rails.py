"""Rails: communicators of one GPU per node, split by local rank, and how a failing rail is named.

On a rail-optimised fabric (HGX H100/H200: eight HCAs, one per GPU, each cabled to its own leaf
switch) GPU *k* of every node talks to GPU *k* of every other node through HCA *k*: that set is a
rail. A job spanning whole nodes hides one slow rail behind seven healthy ones; a communicator per
rail exposes it. nccl-tests does the same with ``NCCL_TESTS_SPLIT="MOD 8"`` (its ``src/common.cu``
colours rank ``r`` with ``r % 8``): with Slurm's block distribution (ranks 0-7 on the first node,
8-15 on the second...) ``rank % ranks_per_node`` *is* the local rank. Splitting by the local rank
each process reports keeps that meaning under any distribution.

Pure functions: the ``nccl`` probe splits with ``split_rails``; the fabric test names rails with
``rail_label`` and re-tests a failing rail's nodes in pairs with ``rail_rounds``
(``gpuaccept.nccl.plan`` gives the pairs, ``verdicts.nccl_blame.attribute`` the blame), unless
``pairs_absent`` says the nodes are too few to tell; ``complete_pairs`` keeps the pairs that can blame.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gpuaccept.nccl.plan import plan_rounds

__all__ = [
    "complete_pairs",
    "pair_nodes",
    "pairs_absent",
    "parse_rails",
    "rail_groups_spec",
    "rail_label",
    "rail_rounds",
    "split_rails",
]


def parse_rails(spec: str) -> set[int] | None:
    """Which local ranks to measure: ``"all"`` (or ``""``) -> None, every rail; ``"0,3"`` -> {0, 3}.

    Whether rails are asked for at all is the caller's flag (an empty ``--rails``).
    """
    spec = spec.strip().lower()
    if spec in ("", "all"):
        return None
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ValueError(f"--rails {spec!r}: expected 'all' or local ranks such as '0,3'")
        out.add(int(part))
    return out


def split_rails(
    groups: Sequence[Sequence[int]], local_ranks: Sequence[int], only: set[int] | None = None
) -> list[tuple[int, list[int]]]:
    """``[(rail, ranks)]``: every group split by local rank (rails in ``only``, or all), rail order.

    ``local_ranks[r]`` is rank ``r``'s local rank. Ranks on rails not asked for belong to no
    communicator (they idle through the step). A rail holding a single rank is dropped: it has no
    peer to talk to (a node group of one).
    """
    out: list[tuple[int, list[int]]] = []
    for group in groups:
        by_rail: dict[int, list[int]] = {}
        for rank in group:
            rail = local_ranks[rank]
            if only is None or rail in only:
                by_rail.setdefault(rail, []).append(rank)
        out += [(rail, sorted(ranks)) for rail, ranks in sorted(by_rail.items()) if len(ranks) > 1]
    return out


def rail_label(rail: int, hcas: Mapping[str, str | None]) -> str:
    """``rail 3 (mlx5_3)``, ``rail 3 (node1 mlx5_3, node2 mlx5_4)`` when nodes differ, ``rail 3`` without IB.

    ``hcas`` maps each node of the rail to the HCA its rail GPU is PCIe-affine to (None: unknown).
    """
    known = {node: hca for node, hca in hcas.items() if hca}
    if not known:
        return f"rail {rail}"
    names = set(known.values())
    if len(names) == 1 and len(known) == len(hcas):
        return f"rail {rail} ({names.pop()})"
    return f"rail {rail} (" + ", ".join(f"{node} {hca or '?'}" for node, hca in hcas.items()) + ")"


def rail_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Second pass for one failing rail: its nodes in disjoint pairs, a step per round.

    No node is known good on the rail, so the suspects pair around a ring: each meets two partners and
    the one failing with both stands out (``gpuaccept.nccl.plan.plan_rounds``).
    """
    return plan_rounds(list(nodes), [])


def rail_groups_spec(pairs: Sequence[tuple[str, str]]) -> str:
    """The probe's ``--groups`` for a round of pairs: ``a,b;c,d``."""
    return ";".join(f"{a},{b}" for a, b in pairs)


def pairs_absent(nodes: Sequence[str]) -> str | None:
    """Why a failing rail's nodes are not re-tested in pairs, or None: two nodes cannot tell which end is slow."""
    if len(nodes) < 3:
        return f"fails between {' and '.join(nodes)}: two nodes cannot tell which end is slow"
    return None


def pair_nodes(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The nodes of a round of pairs, in the order the probe's ``--groups`` names them (the step's nodes)."""
    return [node for pair in pairs for node in pair]


def complete_pairs(pair_ok: Mapping[tuple[str, str], bool], lost: Collection[str]) -> dict[tuple[str, str], bool]:
    """The second pass's pairs whose nodes are both still in the run: a pair that lost a member is incomplete,
    and blames nobody."""
    return {pair: ok for pair, ok in pair_ok.items() if not set(pair) & set(lost)}
