"""Finding the bad node: whom to suspect after the first pass, and which pairs to re-test.

Google's cluster-health-scanner runs NCCL in node pairs, then re-tests every node of a failing pair
with a node that passed (its "second pass"): a node that fails with a known-good partner is at fault,
one that passes is cleared. Here the first pass is any multi-node scale (groups of 2, 4, ... nodes
measured side by side); a group fails when it misses the floor, when it falls too far below its
sibling groups' median, or when a result was wrong (``nccl.groups``); ``attribute`` reads the blame
from the second pass, for nodes here and for HCAs in ``fabric.schedule``. Everything is plain data so
the selftests can drive it with a simulated slow node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Blame", "Group", "Pair", "attribute", "plan_rounds", "suspects_and_good"]

Group = tuple[str, ...]
Pair = tuple[str, str]


def suspects_and_good(
    nodes: Sequence[str], groups: Mapping[int, Sequence[Group]], failing: Mapping[int, Iterable[Group]]
) -> tuple[int | None, list[str], list[str]]:
    """``(scale, suspects, good)`` from the first pass: the smallest scale with a failing group decides.

    Suspects are the nodes of that scale's failing groups, less those that already passed in a smaller
    group (one slow node must not condemn every larger group it sits in: at the all-nodes scale everyone
    shares its group). If every node of the failing groups passed at smaller scales, the failure belongs
    to the scale itself (fabric, not one node) and they all stay suspects, to be paired among themselves.
    Good nodes were measured in passing groups at that scale or below and are not suspects.
    """
    bad_scales = sorted(s for s, g in failing.items() if list(g))
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


@dataclass(frozen=True)
class Blame:
    """The verdict on one suspect: ``at_fault``, ``cleared`` or ``undetermined``, and the evidence."""

    node: str
    verdict: str
    evidence: tuple[str, ...]


def attribute(pair_ok: Mapping[Pair, bool], suspects: Iterable[str], good: Iterable[str]) -> dict[str, Blame]:
    """Blame from second-pass outcomes: failing with a trusted partner convicts, any pass clears.

    A partner is trusted when it is known-good from the first pass or was itself cleared by passing
    another pair. A suspect whose every pair failed but whose partners are all untrusted stays
    ``undetermined`` (e.g. two nodes only: the pair fails and nothing can tell them apart).
    """
    suspects = list(dict.fromkeys(suspects))
    trusted = set(good)
    for (a, b), ok in pair_ok.items():
        if ok:
            trusted.update((a, b))
    out: dict[str, Blame] = {}
    for node in suspects:
        mine = [(pair, ok) for pair, ok in pair_ok.items() if node in pair]
        partners = [(pair[1] if pair[0] == node else pair[0], ok) for pair, ok in mine]
        evidence = tuple(f"with {p}: {'passed' if ok else 'failed'}" for p, ok in partners)
        if not mine:
            out[node] = Blame(node, "undetermined", ("not re-tested (no partner available)",))
        elif any(ok for _, ok in partners):
            out[node] = Blame(node, "cleared", evidence)
        elif any(p in trusted for p, _ in partners):
            out[node] = Blame(node, "at_fault", evidence)
        else:
            out[node] = Blame(node, "undetermined", evidence)
    return out
