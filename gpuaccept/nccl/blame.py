"""The blame from the second pass: which suspect is at fault, cleared, or cannot be told apart.

Google's cluster-health-scanner runs NCCL in node pairs, then re-tests every node of a failing pair
with a node that passed (its "second pass"): a node that fails with a known-good partner is at fault,
one that passes is cleared. Whom to suspect and which pairs to run is planned in ``nccl.plan``;
``attribute`` reads the blame from the pairs' outcomes, for nodes here and for HCAs in
``fabric.schedule``. Plain data, so the selftests can drive it with a simulated slow node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuaccept.nccl.plan import Pair

__all__ = ["Blame", "attribute"]


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
