"""The NCCL area's judging, its one home: ``tests/acceptance/test_nccl.py`` plans, runs the probes and builds
the group tables (``contracts.nccl_sweep.group_tables``), then hands them here, where every check is recorded:

* one node (``judge_node``): busbw per collective at the largest size against the floor at the node's
  rank count; every rank's results verified. nccl-tests beside ours (``judge_fidelity``);
* a multi-node scale (``group_failures``, ``judge_scale``): a group fails when a collective misses its
  floor (``metric@N`` first), its all_reduce busbw is more than ``straggler_pct`` below the median
  group, its scaling efficiency misses its limit, or a result was wrong;
* the bad node (``pair_outcome``, ``attribute``, ``judge_cleared``, ``judge_blame``): Google
  cluster-health-scanner's second pass; a suspect failing with a trusted partner is at fault, one that
  passes is cleared. ``attribute`` also blames the HCAs and rails of ``verdicts.fabric``.

The rules use the judging core's one comparison (``judge_value``) and the limits the judge declares; the
judging core knows nothing of NCCL. Plain data in, checks out: the selftests drive it with simulated tables.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_sweep import GroupTable, Row, format_bytes
from gpuaccept.contracts.payloads import CappedSizes, NcclTestsRun
from gpuaccept.errors import MeasurementError
from gpuaccept.judging.judge import judge_value
from gpuaccept.nccl.plan import Group, Pair
from gpuaccept.verdicts.nccl_lines import median_busbw, metric_name, wrong_lines

if TYPE_CHECKING:
    from gpuaccept.contracts.records import RankRecord
    from gpuaccept.judging.judge import Judge
    from gpuaccept.thresholds.schema import Limit

__all__ = [
    "FAULT_METRICS",
    "FIDELITY_METRICS",
    "NODE_METRICS",
    "SCALE_METRICS",
    "Blame",
    "PairOutcome",
    "attribute",
    "curve",
    "group_failures",
    "judge_blame",
    "judge_cleared",
    "judge_fidelity",
    "judge_node",
    "judge_scale",
    "pair_outcome",
    "pair_reference",
    "pair_verdict",
    "slow_groups",
]

#: what each judge here judges: its test's ``@pytest.mark.judges``
NODE_METRICS = (*(metric_name(c, False) for c in COLLECTIVES), "nccl_wrong_elements")
FIDELITY_METRICS = ("nccl_fidelity_pct",)
SCALE_METRICS = (*(metric_name(c, True) for c in COLLECTIVES), "nccl_scaling_efficiency_pct")
#: the bad-node test judges the all_reduce floor; its groups were failed by the first three collectives
FAULT_METRICS = tuple(metric_name(c, True) for c in ("all_reduce", "all_gather", "reduce_scatter"))

#: one second-pass pair: (passed, why, all_reduce busbw; NaN when the pair did not complete)
PairOutcome = tuple[bool, str, float]


def curve(table: GroupTable, collective: str) -> list[list[float]]:
    """``[[bytes, busbw], ...]`` of the sweep: the whole curve travels with the check (summary page)."""
    return [[row.size, round(row.busbw, 3)] for row in table.by_collective(collective)]


# ---- one node ---------------------------------------------------------------------------------------


def judge_node(
    table: GroupTable,
    records: Sequence[RankRecord],
    facts: Mapping[str, Any],
    labels: Mapping[int, str],
    judge: Judge,
    node: str,
    ranks: int,
) -> None:
    """All ``ranks`` of one node: busbw per collective at the largest size (the floor at that rank count),
    every rank's results verified. A collective with no size that fit in GPU memory could not be measured
    (``MeasurementError``)."""
    algos = facts.get("algorithms", {})
    for collective in COLLECTIVES:
        row = table.largest(collective)
        if row is None:
            capped: CappedSizes | None = records[0].data.get("capped", {}).get(collective)
            raise MeasurementError(f"{node}: no size of {collective} fit in GPU memory ({capped})", nodes=(node,))
        judge.check(
            metric_name(collective, False),
            round(row.busbw, 2),
            node=node,
            scale=ranks,
            size=row.size,
            curve=curve(table, collective),
            time_us=round(row.time_us, 1),
            algo=algos.get(collective, {}).get(str(row.size)),
            nccl=facts.get("nccl_version"),
            transports=facts.get("transports"),
            nics=facts.get("nics"),
        )
    lines = wrong_lines(table, labels)
    for record in records:
        wrong = sum(int(r.get("wrong", 0)) for r in record.data.get("results", []))
        rank = {"gpu": record.gpu_label} if record.gpu_label else {"rank": record.rank}
        mine = [line for line in lines if f" on {labels.get(record.rank, f'rank {record.rank}')}:" in line]
        judge.check("nccl_wrong_elements", wrong, node=node, **rank, details=mine)


def judge_fidelity(runs: Mapping[str, NcclTestsRun], table: GroupTable, size: int, judge: Judge, node: str) -> None:
    """nccl-tests' busbw (``runs``: the ``nccl_tests`` probe's per-collective rows) beside ours at ``size``.

    torch runs all_reduce and broadcast in place and all_gather out of place: like is compared with like."""
    print(f"{'collective':>12} {'size':>8} {'ours':>8} {'nccl-tests oop':>15} {'in-place':>9}")
    for collective, run in runs.items():
        if run.get("returncode") != 0 or not run.get("rows"):
            raise MeasurementError(
                f"{node}: nccl-tests {collective} failed: {run.get('error') or run.get('stderr_tail')}"
            )
        ref = next((r for r in run["rows"] if r["size"] == size), run["rows"][-1])
        ours = table.at(collective, ref["size"])
        if ours is None:
            raise MeasurementError(
                f"{node}: our sweep has no {collective} at {format_bytes(ref['size'])}", nodes=(node,)
            )
        their_busbw = ref["ip_busbw"] if collective in ("all_reduce", "broadcast") else ref["oop_busbw"]
        print(
            f"{collective:>12} {format_bytes(ref['size']):>8} {ours.busbw:>8.2f} "
            f"{ref['oop_busbw']:>15.2f} {ref['ip_busbw']:>9.2f}"
        )
        judge.info("nccl_tests_busbw_gbs", their_busbw, node=node, collective=collective, size=ref["size"])
        judge.check(
            "nccl_fidelity_pct",
            round(100 * ours.busbw / their_busbw, 1),
            node=node,
            collective=collective,
            ours=round(ours.busbw, 2),
            nccl_tests=their_busbw,
            size=ref["size"],
        )


# ---- a multi-node scale -----------------------------------------------------------------------------


def slow_groups(
    values: Mapping[Group, float], *, floor: float | None = None, straggler_pct: float | None = None
) -> dict[Group, str]:
    """Groups that fail, with the reason: below ``floor``, or > ``straggler_pct``% below the median group
    (with two, their mean: the slower is flagged past twice ``straggler_pct``; one has nothing to compare)."""
    out: dict[Group, str] = {}
    finite = {g: v for g, v in values.items() if v == v}
    median = statistics.median(finite.values()) if len(finite) >= 2 else None
    for group, value in values.items():
        reasons = []
        if value != value:
            reasons.append("no value")
        elif floor is not None and value < floor:
            reasons.append(f"{value:.3g} < min {floor:g}")
        if median is not None and straggler_pct is not None and value == value:
            if value < median * (1 - straggler_pct / 100):
                reasons.append(f"{value:.3g} is more than {straggler_pct:g}% below the median group {median:.3g}")
        if reasons:
            out[group] = "; ".join(reasons)
    return out


def group_failures(
    tables: Sequence[GroupTable],
    judge: Judge,
    *,
    multinode: bool,
    baseline: float | None = None,
) -> dict[tuple[str, ...], list[str]]:
    """Why each group fails (empty dict: all pass): floor misses, straggling, efficiency, wrong results.

    ``baseline`` is the median all_reduce busbw of the smallest multi-node scale; with it, each group's
    efficiency is judged against the SKU's ``nccl_scaling_efficiency_pct``. Limits are the ones in
    force for the group's first node at the group's node count. Nothing is recorded: ``judge_scale``
    records each figure; this decides which groups fail and which the second pass re-tests.
    """
    reasons: dict[tuple[str, ...], list[str]] = {}
    for table in tables:
        why = reasons.setdefault(table.nodes, [])
        scale = len(table.nodes)
        for collective in COLLECTIVES:
            row = table.largest(collective)
            if row is None:
                continue
            limit = judge.declared(metric_name(collective, multinode), table.nodes[0], scale)
            if limit is not None:
                ok, text = judge_value(row.busbw, limit)
                if not ok:
                    why.append(f"{collective} {format_bytes(row.size)} busbw {text}")
        if table.wrong_results():
            why.append(f"{len(table.wrong_results())} wrong result(s)")
        ar = table.largest("all_reduce")
        efficiency = judge.declared("nccl_scaling_efficiency_pct", table.nodes[0], scale)
        if baseline and ar is not None and efficiency is not None:
            ok, text = judge_value(100.0 * ar.busbw / baseline, efficiency)
            if not ok:
                why.append(f"scaling efficiency {text} % (vs {baseline:.3g} GB/s at the smallest scale)")
    values = {t.nodes: row.busbw if (row := t.largest("all_reduce")) is not None else float("nan") for t in tables}
    if len(values) >= 2:
        for group, text in slow_groups(values, straggler_pct=judge.setting("straggler_pct")).items():
            reasons[group].append(f"all_reduce busbw {text}")
    return {g: r for g, r in reasons.items() if r}


def judge_scale(
    tables: Sequence[GroupTable],
    failures: Mapping[Group, Sequence[str]],
    base: float | None,
    scale: int,
    judge: Judge,
) -> None:
    """Every group of one scale: busbw per collective on each of its nodes, its scaling efficiency against
    the smallest scale's median (``base``; None at the smallest scale itself), and the group's verdict
    (``failures``: ``group_failures``' reasons)."""
    for table in tables:
        for collective in COLLECTIVES:
            row = table.largest(collective)
            if row is None:
                continue
            for node in table.nodes:
                judge.check(
                    metric_name(collective, True),
                    round(row.busbw, 2),
                    node=node,
                    scale=scale,
                    group=table.label,
                    size=row.size,
                    curve=curve(table, collective),
                    nccl_algo=table.info["algo"],
                )
        ar = table.largest("all_reduce")
        if base and ar is not None:
            for node in table.nodes:
                efficiency = round(100 * ar.busbw / base, 1)
                judge.check(
                    "nccl_scaling_efficiency_pct",
                    efficiency,
                    node=node,
                    scale=scale,
                    group=table.label,
                    baseline_gbs=round(base, 2),
                )
        why = list(failures.get(table.nodes, []))
        details = wrong_lines(table, table.info["labels"])
        if why:
            details.append("test_nccl_node_at_fault re-tests these nodes in pairs with nodes that passed")
        for node in table.nodes:  # the group's verdict: its floors, its place among the groups, its results
            verdict = "; ".join(why) or "passed"
            judge.expect(
                "nccl_group_verdict", verdict, "passed", node=node, scale=scale, group=table.label, details=details
            )


# ---- the bad node -----------------------------------------------------------------------------------


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
    tables: Mapping[int, Sequence[GroupTable]], failing: Mapping[int, Mapping[Group, Any]]
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
    suspect: str, tables: Mapping[int, Sequence[GroupTable]], nodes: Sequence[str], role: str, judge: Judge
) -> None:
    """A node no failing group made a suspect: judged on its own worst all_reduce figure over the scales.

    No "not at fault" expectation: the blame rule did not run, and an expected value written twice could
    not fail. A node that sat out every scale of the nodes left could not be measured."""
    figures = [
        (row.busbw, s, t.label)
        for s, ts in tables.items()
        for t in ts
        if suspect in t.nodes and (row := t.largest("all_reduce")) is not None
    ]
    if not figures:  # sat out every scale of the nodes left (e.g. the odd node of 3 at scale 2 only)
        raise MeasurementError(f"{suspect}: in no NCCL group of the nodes left ({', '.join(nodes)})")
    worst = min(figures)
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
