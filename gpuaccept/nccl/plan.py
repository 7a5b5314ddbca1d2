"""Which nodes meet in which NCCL step: scales, groups, suspects and second-pass pairs, from the live nodes.

One home for the planning every multi-node test asks: the scales and groups of ``test_nccl_scale``,
the suspects and pairs of ``test_nccl_node_at_fault`` (Google cluster-health-scanner's two passes),
the rail pairs of ``test_nccl_rails`` (``fabric.rails``). It always plans on the nodes still in the
run: a node lost mid-run (``Cluster.lost``) is left out of every later plan, a group that lost a
member is *incomplete* (its figures neither fail nor clear anyone), and a scale that no longer fits
is planned on what remains or dropped with the loss named. So the survivors are planned exactly as
a clean run of the survivors alone would plan them.

The scales are collected once, from the allocation (pytest parametrizes before any test runs):
``live_scale`` maps each collected scale to the one it means now. The blame from the second pass
is ``verdicts.nccl_blame.attribute``. Plain data throughout, so the selftests drive it without a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from gpuaccept.timelimits import TimeLimit

__all__ = [
    "Group",
    "NodePlan",
    "Pair",
    "lost_text",
    "op_timeout_args",
    "pair_rounds",
    "plan_rounds",
    "scale_groups",
    "scale_id",
    "scales_for",
    "suspects_and_good",
]

Group = tuple[str, ...]
Pair = tuple[str, str]

#: a hung collective must be named by the probe's watchdog (``nccl.watchdog``) before the step's limit ends it:
#: one collective and size may take a third of the step's limit (start-up, the rendezvous and the final barrier
#: share the rest), never under 10 s (a first large NCCL launch on a cold node takes seconds)
OP_TIMEOUT_SHARE, OP_TIMEOUT_MIN_S = 3, 10.0


def op_timeout_args(args: tuple[str, ...], limit: TimeLimit) -> tuple[str, ...]:
    """The ``nccl`` spec's derived arguments: ``--op-timeout`` for a step of ``limit`` (the spec's limit, as the
    cluster resolved it), a third of it, at least ``OP_TIMEOUT_MIN_S``; none where the step was given one."""
    if any(a.startswith("--op-timeout") for a in args):
        return ()
    return (f"--op-timeout={max(OP_TIMEOUT_MIN_S, limit.seconds / OP_TIMEOUT_SHARE)}",)


def scales_for(nodes: int) -> list[int]:
    """Multi-node scales: 2, 4, 8, ... below ``nodes``, then ``nodes`` itself (empty for one node)."""
    out = []
    scale = 2
    while scale < nodes:
        out.append(scale)
        scale *= 2
    if nodes >= 2:
        out.append(nodes)
    return out


def scale_groups(nodes: Sequence[str], scale: int) -> list[Group]:
    """Disjoint groups of ``scale`` consecutive nodes, measured at once (leftovers sit this scale out).

    Every node is measured at every scale it fits in, and groups at the same scale can be compared
    with each other: a group far below its siblings points at one of its nodes (the first pass of
    cluster-health-scanner, generalised from pairs to any power of two). A scale that does not fit
    gives no group (the caller re-plans: ``NodePlan.scale``).
    """
    if scale < 2 or scale > len(nodes):
        return []
    return [tuple(nodes[i : i + scale]) for i in range(0, len(nodes) - scale + 1, scale)]


def scale_id(scale: int | None, nodes: int) -> str:
    """The test id of a collected scale: ``one-node``, ``2-nodes``, ``all-4-nodes``."""
    if scale is None:
        return "one-node"
    return f"all-{scale}-nodes" if scale == nodes else f"{scale}-nodes"


def lost_text(lost: Mapping[str, str]) -> str:
    """``node4 was lost during the run: its slurmd did not take a step (...)``, one clause per node."""
    return "; ".join(f"{node} was lost during the run: {why}" for node, why in sorted(lost.items()))


@dataclass(frozen=True)
class NodePlan:
    """The nodes of the allocation and those still in the run, and the plans made from them.

    ``allocated``: every node the run started with, in allocation order; ``lost``: node -> why it
    left the run. Build it afresh at each use (``NodePlan(cluster.launcher_nodes, cluster.lost)``,
    what ``Cluster.plan()`` returns): a node lost since the last plan is then out of the next.
    """

    allocated: tuple[str, ...]
    lost: Mapping[str, str] = field(default_factory=dict)

    @property
    def live(self) -> list[str]:
        """The nodes still in the run, in allocation order."""
        return [n for n in self.allocated if n not in self.lost]

    def scales(self) -> list[int]:
        """The scales a clean run of the live nodes alone measures."""
        return scales_for(len(self.live))

    def scale(self, collected: int | None) -> tuple[int | None, str]:
        """The scale a collected one means now, or None and why it is not measured.

        The all-nodes scale becomes all live nodes; a smaller one that still fits stays; one that no
        longer fits, or that all-live-nodes now equals, is dropped (``why`` names the loss).
        """
        if collected is None:
            return None, "the allocation has one node: no multi-node scale"
        live = self.live
        loss = f" ({lost_text(self.lost)})" if self.lost else ""
        if len(live) < 2:
            return None, f"{len(live)} node left of {len(self.allocated)}: no multi-node scale{loss}"
        if collected == len(self.allocated):
            return len(live), ""
        if collected >= len(live):
            return None, f"scale {collected} is now measured as all {len(live)} nodes left{loss}"
        return collected, ""

    def groups(self, scale: int) -> list[Group]:
        """The groups of ``scale`` live nodes measured side by side."""
        return scale_groups(self.live, scale)

    def complete(self, group: Iterable[str]) -> bool:
        """No member of ``group`` has been lost (an incomplete group's figures blame nobody)."""
        return not any(n in self.lost for n in group)


def suspects_and_good(
    nodes: Sequence[str],
    groups: Mapping[int, Sequence[Group]],
    failing: Mapping[int, Iterable[Group]],
    lost: Iterable[str] = (),
) -> tuple[int | None, list[str], list[str]]:
    """``(scale, suspects, good)`` from the first pass: the smallest scale with a failing group decides.

    Suspects are the nodes of that scale's failing groups, less those that already passed in a smaller
    group (one slow node must not condemn every larger group it sits in: at the all-nodes scale everyone
    shares its group). If every node of the failing groups passed at smaller scales, the failure belongs
    to the scale itself (fabric, not one node) and they all stay suspects, to be paired among themselves.
    Good nodes were measured in passing groups at that scale or below and are not suspects.

    A group with a ``lost`` member is incomplete: it neither fails nor passes, so its survivors are
    never suspects because of it, and a lost node is neither suspect nor good.
    """
    gone = set(lost)
    nodes = [n for n in nodes if n not in gone]
    groups = {s: [g for g in gs if not gone & set(g)] for s, gs in groups.items()}
    failing = {s: [g for g in gs if not gone & set(g)] for s, gs in failing.items()}
    bad_scales = sorted(s for s, g in failing.items() if g)
    if not bad_scales:
        return None, [], []
    first = bad_scales[0]
    bad = {n for g in failing[first] for n in g}
    passed_smaller = {n for s, gs in groups.items() if s < first for g in gs for n in g}
    suspects = [n for n in nodes if n in bad and n not in passed_smaller] or [n for n in nodes if n in bad]
    passing = {n for s, gs in groups.items() if s <= first for g in gs if g not in set(failing.get(s, ())) for n in g}
    good = [n for n in nodes if (n in passing or n in passed_smaller) and n not in suspects]
    return first, suspects, good


def plan_rounds(suspects: Sequence[str], good: Sequence[str]) -> list[list[Pair]]:
    """Second-pass pairs, in rounds of disjoint pairs (each round is one step, pairs side by side).

    Each suspect is paired with a known-good node (``good``, round-robin; a good node serves once per
    round). With no good node at all, suspects are paired around a ring (``s0-s1, s1-s2, ..., sk-s0``)
    so each meets two different partners and one failing with both stands out from its neighbours.
    """
    suspects = list(dict.fromkeys(suspects))
    good = [g for g in dict.fromkeys(good) if g not in suspects]
    if not suspects:
        return []
    if good:
        rounds: list[list[Pair]] = []
        queue = list(suspects)
        while queue:
            batch, queue = queue[: len(good)], queue[len(good) :]
            rounds.append([(s, good[i]) for i, s in enumerate(batch)])
        return rounds
    if len(suspects) < 2:
        return []
    ring = list(
        dict.fromkeys(tuple(sorted((suspects[i], suspects[(i + 1) % len(suspects)]))) for i in range(len(suspects)))
    )
    return _rounds([(a, b) for a, b in ring])


def _rounds(pairs: list[Pair]) -> list[list[Pair]]:
    """Greedy split of ``pairs`` into rounds in which no node appears twice."""
    rounds: list[list[Pair]] = []
    for pair in pairs:
        for batch in rounds:
            if not any(set(pair) & set(other) for other in batch):
                batch.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds


def pair_rounds(
    suspects: Sequence[str], good: Sequence[str], lost: Callable[[], Mapping[str, str]]
) -> Iterator[list[Pair]]:
    """The second pass's rounds (``plan_rounds``), re-planned on the nodes left as it goes.

    ``lost()`` is asked after each planned batch of rounds has run: a live suspect none of whose pairs so far
    is complete (every partner was lost) is paired again with a partner still in the run that it has not met
    (a known-good node, or with no good node at all another live suspect), as a clean run of the nodes left
    would pair it; until every live suspect has a complete pair or no partner is left to try.
    """
    tried: set[Pair] = set()
    todo = plan_rounds(suspects, good)
    while todo:
        for pairs in todo:
            tried.update(pairs)
            yield pairs
        gone = lost()
        partners = [g for g in good if g not in gone] if good else [s for s in suspects if s not in gone]
        again: list[Pair] = []
        for suspect in suspects:
            mine = [p for p in tried if suspect in p]
            if suspect in gone or any(not set(p) & set(gone) for p in mine):
                continue
            met = {n for p in mine for n in p}
            partner = next((n for n in partners if n != suspect and n not in met), None)
            if partner is not None:
                again.append((suspect, partner))
        todo = _rounds(again)
