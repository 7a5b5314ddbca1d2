"""The NCCL area's judging, its one home: ``tests/acceptance/test_nccl.py`` plans, runs the probes and builds
the group tables (``contracts.nccl_sweep.group_tables``), then hands them here, where every check is recorded:

* one node (``judge_node``): busbw per collective at the largest size against the floor at the node's
  rank count; every rank's results verified. nccl-tests beside ours (``judge_fidelity``), or the check
  not run where nccl-tests is not installed (``judge_nccl_tests_found``);
* a multi-node scale (``group_failures``, ``judge_scale``): a group fails when a collective misses its
  floor (``metric@N`` first), its all_reduce busbw is more than ``straggler_pct`` below the median
  group, its scaling efficiency misses its limit, or a result was wrong;
* the bad node: ``verdicts.nccl_blame``, the second pass over the suspects these tables make.

The rules use the judging core's one comparison (``judge_value``) and the limits the judge declares; the
judging core knows nothing of NCCL. Plain data in, checks out: the selftests drive it with simulated tables.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_payloads import CappedSizes, NcclTestsRecord, NcclTestsRun
from gpuaccept.contracts.nccl_sweep import GroupTable, format_bytes, nccl_payload
from gpuaccept.judging.judge import judge_value
from gpuaccept.nccl.facts import RunFacts
from gpuaccept.nccl.plan import Group
from gpuaccept.verdicts.nccl_lines import metric_name, wrong_lines

if TYPE_CHECKING:
    from gpuaccept.contracts.records import RankRecord
    from gpuaccept.judging.judge import Judge

__all__ = [
    "FAULT_METRICS",
    "FIDELITY_METRICS",
    "NODE_METRICS",
    "SCALE_METRICS",
    "curve",
    "group_failures",
    "judge_fidelity",
    "judge_nccl_tests_found",
    "judge_node",
    "judge_scale",
    "slow_groups",
]

#: what each judge here judges: its test's ``@pytest.mark.judges``
NODE_METRICS = (*(metric_name(c, False) for c in COLLECTIVES), "nccl_wrong_elements")
FIDELITY_METRICS = ("nccl_fidelity_pct",)
SCALE_METRICS = (*(metric_name(c, True) for c in COLLECTIVES), "nccl_scaling_efficiency_pct")
#: the bad-node test judges the all_reduce floor; its groups were failed by the first three collectives
FAULT_METRICS = tuple(metric_name(c, True) for c in ("all_reduce", "all_gather", "reduce_scatter"))


def curve(table: GroupTable, collective: str) -> list[list[float]]:
    """``[[bytes, busbw], ...]`` of the sweep: the whole curve travels with the check (summary page)."""
    return [[row.size, round(row.busbw, 3)] for row in table.by_collective(collective)]


# ---- one node ---------------------------------------------------------------------------------------


def judge_node(
    table: GroupTable,
    records: Sequence[RankRecord],
    facts: RunFacts,
    labels: Mapping[int, str],
    judge: Judge,
    node: str,
    ranks: int,
) -> None:
    """All ``ranks`` of one node: busbw per collective at the largest size (the floor at that rank count),
    every rank's results verified. A collective with no size that fit in GPU memory could not be measured:
    its check is recorded unreadable and nothing further is judged."""
    algos = facts.algorithms
    for collective in COLLECTIVES:
        row = table.largest(collective)
        if row is None:
            comm = nccl_payload(records[0])["communicator"]
            capped: CappedSizes | None = comm["capped"][collective] if comm["outcome"] == "in_group" else None
            why = f"no size of {collective} fit in GPU memory ({capped})"
            judge.unreadable(metric_name(collective, False), why, node=node, scale=ranks)
            return
        judge.check(
            metric_name(collective, False),
            round(row.busbw, 2),
            node=node,
            scale=ranks,
            size=row.size,
            curve=curve(table, collective),
            time_us=round(row.time_us, 1),
            algo=algos[collective].get(str(row.size)) if collective in algos else None,
            nccl=facts.nccl_version,
            transports=dict(facts.transports),
            nics=facts.nics,
        )
    lines = wrong_lines(table, labels)
    for record in records:
        mine_comm = nccl_payload(record)["communicator"]
        wrong = sum(r["wrong"] for r in mine_comm["results"]) if mine_comm["outcome"] == "in_group" else 0
        rank = {"gpu": record.gpu_label} if record.gpu_label else {"rank": record.rank}
        mine = [line for line in lines if f" on {labels.get(record.rank, f'rank {record.rank}')}:" in line]
        judge.check("nccl_wrong_elements", wrong, node=node, **rank, details=mine)


def judge_nccl_tests_found(theirs: NcclTestsRecord, judge: Judge, node: str) -> None:
    """The fidelity check needs nccl-tests on ``node``: where the ``nccl_tests`` probe found no binary, the test
    ends ``not run`` naming where it looked (``judge.tool_missing``), listed in the cluster's verdict; a
    missing tool is neither a property of the cluster (a skip) nor a measurement gone wrong (an ERROR)."""
    if not theirs["found"]:
        detail = f"looked in {', '.join(theirs['searched'])}; --nccl-tests-dir"
        judge.tool_missing("nccl-tests fidelity", "nccl-tests", node=node, detail=detail)


def judge_fidelity(runs: Mapping[str, NcclTestsRun], table: GroupTable, size: int, judge: Judge, node: str) -> None:
    """nccl-tests' busbw (``runs``: the ``nccl_tests`` probe's per-collective rows) beside ours at ``size``.

    torch runs all_reduce and broadcast in place and all_gather out of place: like is compared with like."""
    print(f"{'collective':>12} {'size':>8} {'ours':>8} {'nccl-tests oop':>15} {'in-place':>9}")
    for collective, run in runs.items():
        if run["outcome"] == "timed_out" or run["returncode"] != 0 or not run["rows"]:
            told = run["error"] if run["outcome"] == "timed_out" else f"exit {run['returncode']}: {run['stderr_tail']}"
            why = f"nccl-tests {collective} failed: {told}"
            judge.unreadable("nccl_fidelity_pct", why, node=node, collective=collective)
            return
        ref = next((r for r in run["rows"] if r["size"] == size), run["rows"][-1])
        ours = table.at(collective, ref["size"])
        if ours is None:
            why = f"our sweep has no {collective} at {format_bytes(ref['size'])}"
            judge.unreadable("nccl_fidelity_pct", why, node=node, collective=collective)
            return
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
