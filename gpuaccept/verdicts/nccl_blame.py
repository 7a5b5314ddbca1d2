"""The bad node, after a multi-node scale failed (``verdicts.nccl``'s first pass): Google
cluster-health-scanner's second pass. Each suspect runs paired with known-good nodes (``pair_outcome``, held to
``pair_limits``); a suspect failing with a trusted partner is at fault, one that passes is cleared, one no
known-good partner can tell apart is undetermined (``attribute``, ``judge_blame``); a node no failing group made a
suspect is judged on its own worst figure (``judge_cleared``). ``attribute`` also blames the HCAs and rails of
``verdicts.fabric``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuaccept.contracts.nccl_sweep import GroupTable, Row
from gpuaccept.judging.judge import judge_value
from gpuaccept.nccl.plan import Group, Pair
from gpuaccept.verdicts.nccl_lines import median_busbw, metric_name

if TYPE_CHECKING:
    from gpuaccept.judging.judge import Judge
    from gpuaccept.thresholds.schema import Limit

__all__ = [
    "Blame",
    "PairOutcome",
    "attribute",
    "judge_blame",
    "judge_cleared",
    "pair_limits",
    "pair_outcome",
    "pair_reference",
    "pair_verdict",
]

#: one second-pass pair: (passed, why, all_reduce busbw; NaN when the pair did not complete)
PairOutcome = tuple[bool, str, float]


def pair_verdict(
    busbw: float,
    wrong: int,
    *,
    floor: Limit | None,
    reference: float | None,
    straggler_pct: float,
) -> tuple[bool, str]:
    """Second-pass verdict on one pair: the floor, then the first pass's passing median, then correctness."""
    if wrong:
        return False, f"{wrong} wrong element(s)"
    if floor is not None:
        ok, text = judge_value(busbw, floor)
        if not ok:
            return False, f"busbw {text}"
    if reference and busbw < reference * (1 - straggler_pct / 100):
        return False, f"{busbw:.3g} GB/s is more than {straggler_pct:g}% below the first pass median {reference:.3g}"
    return True, f"{busbw:.3g} GB/s"


def pair_reference(
    tables: Mapping[int, Sequence[GroupTable]], failing: Mapping[int, Mapping[Group, Sequence[str]]]
) -> float | None:
    """What a second-pass pair is compared with: pairs are 2-node groups, so the passing groups of the
    smallest scale (their median all_reduce busbw)."""
    smallest = min(tables)
    return median_busbw([t for t in tables[smallest] if t.nodes not in failing.get(smallest, {})])


def pair_limits(judge: Judge, suspect: str) -> tuple[Limit | None, float]:
    """What a second-pass pair with ``suspect`` is held to: the suspect's all_reduce floor at two nodes (a pair
    is a 2-node group) and the straggler margin below the first pass."""
    return judge.declared(metric_name("all_reduce", True), suspect, 2), float(judge.setting("straggler_pct"))


def pair_outcome(
    table: GroupTable, *, floor: Limit | None, reference: float | None, straggler_pct: float
) -> PairOutcome:
    """One second-pass pair's verdict (``pair_verdict``) from its all_reduce at the largest size."""
    row: Row | None = table.largest("all_reduce")
    if row is None:  # the step completed without the collective: the pair did not complete
        return False, "no all_reduce result", float("nan")
    wrong = sum(count for *_, count, _ in table.wrong_results())
    ok, why = pair_verdict(row.busbw, wrong, floor=floor, reference=reference, straggler_pct=straggler_pct)
    return ok, why, row.busbw


@dataclass(frozen=True)
class Blame:
    """The verdict on one suspect: ``at_fault``, ``cleared`` or ``undetermined``, and the evidence."""

    node: str
    verdict: str
    evidence: tuple[str, ...]


def attribute(pair_ok: Mapping[Pair, bool], suspects: Iterable[str], good: Iterable[str]) -> dict[str, Blame]:
    """Blame from second-pass outcomes: failing with a trusted partner convicts, any pass clears. A partner
    is trusted when known-good from the first pass or itself cleared by passing another pair; a suspect
    whose every pair failed with untrusted partners stays ``undetermined`` (two nodes only: nothing can
    tell them apart)."""
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


def judge_cleared(
    suspect: str,
    tables: Mapping[int, Sequence[GroupTable]],
    nodes: Sequence[str],
    role: str,
    judge: Judge,
    suspects: Iterable[str],
) -> None:
    """A node no failing group made a suspect: judged on its own worst all_reduce figure over the scales.

    A group holding a suspect is left out where the node has a figure without one: that group's figure is the
    suspect's, on trial in the second pass (a healthy node that passed beside a healthy partner at 2 nodes and
    then shared the 4-node group with the slow node carried the slow node's figure, and failed beside it). No "not
    at fault" expectation: the blame rule did not run, and an expected value written twice could not fail. A node
    that sat out every scale of the nodes left could not be measured: recorded unreadable."""
    on_trial = set(suspects)
    figures = [
        (row.busbw, s, t.label, on_trial.isdisjoint(t.nodes))
        for s, ts in tables.items()
        for t in ts
        if suspect in t.nodes and (row := t.largest("all_reduce")) is not None
    ]
    if not figures:  # sat out every scale of the nodes left (e.g. the odd node of 3 at scale 2 only)
        why = f"in no NCCL group of the nodes left ({', '.join(nodes)})"
        judge.unreadable(metric_name("all_reduce", True), why, node=suspect, role=role)
        return
    own = [f for f in figures if f[3]] or figures
    worst = min(own)
    judge.check(
        metric_name("all_reduce", True), round(worst[0], 2), node=suspect, scale=worst[1], group=worst[2], role=role
    )


def judge_blame(
    suspect: str,
    pairs: Mapping[Pair, PairOutcome],
    suspects: Sequence[str],
    good: Sequence[str],
    first: int,
    failing: Mapping[Group, Sequence[str]],
    judge: Judge,
) -> None:
    """A suspect's verdict from the second pass (``pairs``: complete pairs only; an incomplete one blames
    nobody): ``nccl_node_verdict`` expected ``not at fault``, with every pair it ran as evidence and why
    its group failed at ``first``, the smallest scale with a failing group (``failing``: that scale's)."""
    blame = attribute({p: ok for p, (ok, _, _) in pairs.items()}, suspects, good)[suspect]
    evidence = []
    for pair, (ok, why, busbw) in pairs.items():
        if suspect not in pair:
            continue
        partner = pair[1] if pair[0] == suspect else pair[0]
        print(f"{suspect} with {partner}: {'passed' if ok else 'FAILED'} ({why})")
        evidence.append(
            {"partner": partner, "passed": ok, "why": why, "busbw_gbs": round(busbw, 2) if busbw == busbw else None}
        )
    observed = {"at_fault": "at fault", "undetermined": "undetermined"}.get(blame.verdict, "not at fault")
    why = {
        "at fault": "it fails paired with known-good nodes",
        "undetermined": "no known-good partner can tell it apart",
        "not at fault": "cleared by the second pass",
    }[observed]
    first_pass = "; ".join(
        f"group {'+'.join(g)} at scale {first}: {', '.join(r)}" for g, r in failing.items() if suspect in g
    )
    print(f"{suspect}: {observed} ({why}); its group failed at scale {first}: {first_pass}")
    judge.expect(
        "nccl_node_verdict", observed, "not at fault", node=suspect, why=why, first_pass=first_pass, pairs=evidence
    )
