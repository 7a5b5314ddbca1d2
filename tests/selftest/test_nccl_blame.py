"""Bad-node finding with a slowed node, and planning on the live nodes: the acceptance test's pipeline on a
simulated cluster.

The same functions test_nccl.py uses (scale_groups -> group_failures -> suspects_and_good -> plan_rounds
-> attribute) are driven by a fake "measure" in which any group holding the slow node runs at a fifth of
the speed, like the probe's GPUACCEPT_FAULT_SLOW_NODE knob makes a real one.
"""

from __future__ import annotations

import pytest

from gpuaccept.contracts.nccl_sweep import GroupTable, Row
from gpuaccept.judging.judge import Judge
from gpuaccept.nccl.plan import NodePlan, plan_rounds, scale_groups, scales_for, suspects_and_good
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.thresholds.schema import Limit
from gpuaccept.verdicts.nccl import group_failures, slow_groups
from gpuaccept.verdicts.nccl_blame import attribute, judge_blame, judge_cleared, pair_outcome, pair_reference
from gpuaccept.verdicts.nccl_lines import median_busbw

pytestmark = pytest.mark.selftest

EFFICIENCY = Limit(min=90, source="test")


def _table(nodes: tuple[str, ...], busbw: float, wrong: int = 0) -> GroupTable:
    row = Row("all_reduce", 1 << 30, len(nodes), 1.0, busbw, busbw, {0: 1.0}, {0: wrong}, {})
    return GroupTable(0, nodes, tuple(range(len(nodes))), rows=[row])


def _measure(nodes: tuple[str, ...], slow: set[str], corrupt: frozenset[str] | set[str] = frozenset()) -> GroupTable:
    base = 40.0 - 0.5 * len(nodes) / 2  # a little loss with scale, well inside 90% efficiency
    return _table(nodes, base / 5 if slow & set(nodes) else base, wrong=3 if corrupt & set(nodes) else 0)


class _Declared:
    """What ``group_failures`` asks of the judging core: the limits in force and the straggler setting."""

    def __init__(self, floor: Limit | None) -> None:
        self.floor = floor

    def declared(self, metric: str, node: str, scale: int | None = None) -> Limit | None:
        if metric == "nccl_all_reduce_busbw_multinode_gbs":
            return self.floor
        return EFFICIENCY if metric == "nccl_scaling_efficiency_pct" else None

    def setting(self, name: str) -> float:
        return 10.0


def _passes(
    nodes: list[str], slow: set[str], corrupt: frozenset[str] | set[str] = frozenset(), floor: float | None = None
):
    """Both passes as test_nccl_node_at_fault runs them, through ``verdicts.nccl`` and ``verdicts.nccl_blame``: the
    first pass's suspects, the second pass's pairs (``pair_outcome``, against ``pair_reference``) and the blame."""
    scales = scales_for(len(nodes))
    tables = {s: [_measure(g, slow, corrupt) for g in scale_groups(nodes, s)] for s in scales}
    base = median_busbw(tables[scales[0]])
    limit = None if floor is None else Limit(min=floor, source="test")
    failing = {
        s: group_failures(tables[s], _Declared(limit), multinode=True, baseline=base if s != scales[0] else None)
        for s in scales
    }
    first, suspects, good = suspects_and_good(nodes, {s: [t.nodes for t in ts] for s, ts in tables.items()}, failing)
    ref = pair_reference(tables, failing)
    outcome = {}
    for round_ in plan_rounds(suspects, good):
        for pair in round_:
            outcome[pair] = pair_outcome(_measure(pair, slow, corrupt), floor=limit, reference=ref, straggler_pct=10)
    blame = attribute({p: ok for p, (ok, _, _) in outcome.items()}, suspects, good)
    return first, suspects, good, blame, outcome, failing


def _find_bad(
    nodes: list[str], slow: set[str], corrupt: frozenset[str] | set[str] = frozenset(), floor: float | None = None
):
    return _passes(nodes, slow, corrupt, floor)[:4]


def test_the_verdict_names_the_slow_node_and_clears_its_partners():
    """``judge_blame`` records what the test records: ``nccl_node_verdict`` fails on the slowed node only,
    with the pairs it ran as evidence and why its group failed."""
    nodes = [f"node{i + 1}" for i in range(4)]
    first, suspects, good, _, pairs, failing = _passes(nodes, {"node3"})
    judge = Judge(load_thresholds(), lambda node: "cpu", lambda result: None, "selftest")
    for suspect in suspects:
        judge_blame(suspect, pairs, suspects, good, first, failing[first], judge)
    verdicts = {r.node: r for r in judge.results if r.metric == "nccl_node_verdict"}
    assert set(verdicts) == set(suspects) and "node3" in suspects
    assert [r.node for r in judge.failures()] == ["node3"] and verdicts["node3"].value == "at fault"
    assert all(e["partner"] in good for e in verdicts["node3"].extra["pairs"])
    assert f"at scale {first}" in verdicts["node3"].extra["first_pass"]


def test_a_cleared_node_is_not_judged_on_the_suspects_group():
    """node1 passed beside node2 at 2 nodes and shared the 4-node group with the slowed node4 (CI, 2026-12-03: the
    slow-tray run's node1 and node2 FAILED the CPU SKU's 0.03 GB/s floor on the 4-node group's 0.02): judged on
    its own pair, it passes. node5, whose 4-node group holds no suspect, is still judged on that group's figure."""
    t = _table
    tables = {
        2: [
            t(("node1", "node2"), 0.5),
            t(("node3", "node4"), 0.02),
            t(("node5", "node6"), 0.5),
            t(("node7", "node8"), 0.5),
        ],
        4: [t(("node1", "node2", "node3", "node4"), 0.02), t(("node5", "node6", "node7", "node8"), 0.02)],
        8: [t(tuple(f"node{i}" for i in range(1, 9)), 0.02)],
    }
    nodes = [f"node{i}" for i in range(1, 9)]
    judge = Judge(load_thresholds(), lambda node: "cpu", lambda result: None, "selftest")
    for node in ("node1", "node2", "node5"):
        judge_cleared(node, tables, nodes, "not a suspect", judge, suspects=["node3", "node4"])
    verdicts = {r.node: (r.verdict, r.extra["scale"], r.value) for r in judge.results}
    assert verdicts == {"node1": ("pass", 2, 0.5), "node2": ("pass", 2, 0.5), "node5": ("fail", 4, 0.02)}


@pytest.mark.parametrize("count", [4, 5, 8, 16])
@pytest.mark.parametrize("slow_index", [0, 2, 3])
def test_slowed_node_is_named_and_others_cleared(count, slow_index):
    nodes = [f"node{i + 1}" for i in range(count)]
    bad = nodes[slow_index]
    first, suspects, good, blame = _find_bad(nodes, {bad})
    assert first == 2, "the smallest scale already shows it"
    assert bad in suspects and len(suspects) == 2
    assert blame[bad].verdict == "at_fault"
    partner = next(n for n in suspects if n != bad)
    assert blame[partner].verdict == "cleared"
    assert bad not in good


def test_odd_node_out_is_caught_at_the_all_nodes_scale():
    """node5 sits out scales 2 and 4 (groups 1-2, 3-4, 1-4); only the 5-node scale shows it, and it alone is paired."""
    nodes = [f"node{i}" for i in range(1, 6)]
    first, suspects, good, blame = _find_bad(nodes, {"node5"})
    assert (first, suspects) == (5, ["node5"]) and good == nodes[:4]
    assert blame["node5"].verdict == "at_fault"


def test_a_scale_failure_without_a_bad_node_clears_everyone():
    groups = {2: [("a", "b"), ("c", "d")], 4: [("a", "b", "c", "d")]}
    first, suspects, good = suspects_and_good(list("abcd"), groups, {4: [("a", "b", "c", "d")]})
    assert (first, suspects, good) == (4, list("abcd"), [])
    ok = {pair: True for round_ in plan_rounds(suspects, good) for pair in round_}
    assert {b.verdict for b in attribute(ok, suspects, good).values()} == {"cleared"}


def test_two_nodes_cannot_be_told_apart():
    """With two nodes and a floor missed, there is no known-good partner: both stay undetermined."""
    first, suspects, good, blame = _find_bad(["a", "b"], {"b"}, floor=20)
    assert first == 2 and suspects == ["a", "b"] and good == []
    assert {b.verdict for b in blame.values()} == {"undetermined"}


def test_wrong_results_condemn_like_slowness():
    nodes = [f"n{i}" for i in range(6)]
    _first, suspects, _good, blame = _find_bad(nodes, set(), corrupt={"n4"})
    assert suspects == ["n4", "n5"] and blame["n4"].verdict == "at_fault" and blame["n5"].verdict == "cleared"


def test_healthy_cluster_has_no_suspects():
    assert _find_bad([f"n{i}" for i in range(8)], set())[1] == []


def test_slow_groups_floor_and_median():
    values = {("a", "b"): 40.0, ("c", "d"): 39.0, ("e", "f"): 8.0}
    out = slow_groups(values, floor=30, straggler_pct=10)
    assert list(out) == [("e", "f")] and "< min 30" in out[("e", "f")] and "below the median" in out[("e", "f")]
    assert slow_groups({("a", "b"): 40.0}, straggler_pct=10) == {}
    assert list(slow_groups({("a", "b"): 40.0, ("c", "d"): 20.0}, straggler_pct=10)) == [("c", "d")]


def test_plan_rounds_pairs_each_suspect_with_a_good_node_once_per_round():
    rounds = plan_rounds(["s1", "s2", "s3"], ["g1", "g2"])
    assert rounds == [[("s1", "g1"), ("s2", "g2")], [("s3", "g1")]]
    for round_ in rounds:
        members = [n for pair in round_ for n in pair]
        assert len(members) == len(set(members))


def test_plan_rounds_without_good_nodes_uses_a_ring():
    rounds = plan_rounds(["a", "b", "c", "d"], [])
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == [("a", "b"), ("a", "d"), ("b", "c"), ("c", "d")]
    for round_ in rounds:
        members = [n for pair in round_ for n in pair]
        assert len(members) == len(set(members))
    assert plan_rounds(["a"], []) == []


def test_attribute_ring_without_good_nodes():
    ok = {("a", "b"): True, ("c", "d"): False, ("b", "c"): False, ("a", "d"): True}
    blame = attribute(ok, ["a", "b", "c", "d"], [])
    assert blame["c"].verdict == "at_fault" and blame["d"].verdict == "cleared"


def test_scales_are_powers_of_two_then_all_nodes():
    assert scales_for(1) == []
    assert scales_for(2) == [2]
    assert scales_for(6) == [2, 4, 6]
    assert scales_for(8) == [2, 4, 8]
    assert scale_groups(list("abcde"), 2) == [("a", "b"), ("c", "d")]
    assert scale_groups(list("abcde"), 5) == [tuple("abcde")]
    assert scale_groups(list("abc"), 4) == []


def test_collected_scales_are_replanned_on_the_live_nodes():
    """4 nodes collected (scales 2 and all-4), node4 lost: the plan is a clean 3-node run's (2, then all 3)."""
    plan = NodePlan(("n1", "n2", "n3", "n4"), {"n4": "its slurmd did not take a step"})
    assert plan.live == ["n1", "n2", "n3"] and plan.scales() == [2, 3]
    assert plan.scale(2) == (2, "") and plan.groups(2) == [("n1", "n2")]
    assert plan.scale(4) == (3, "") and plan.groups(3) == [("n1", "n2", "n3")]
    assert not plan.complete(("n3", "n4")) and plan.complete(("n1", "n2"))


def test_a_scale_that_no_longer_fits_is_dropped_naming_the_loss():
    plan = NodePlan(("n1", "n2", "n3"), {"n3": "Slurm took it out of job 7"})
    assert plan.scale(3) == (2, "")  # all live nodes
    assert plan.scale(2)[0] is None and "n3 was lost during the run: Slurm took it out of job 7" in plan.scale(2)[1]
    alone = NodePlan(("n1", "n2"), {"n2": "gone"})
    scale, why = alone.scale(2)
    assert scale is None and "1 node left of 2" in why and "n2 was lost during the run: gone" in why


def test_a_group_that_lost_a_member_makes_no_survivor_a_suspect():
    """n3+n4 failed at scale 2 because n4 died in it: incomplete, so n3 is neither suspect nor convicted."""
    groups = {2: [("n1", "n2"), ("n3", "n4")], 4: [("n1", "n2", "n3", "n4")]}
    failing = {2: [("n3", "n4")], 4: [("n1", "n2", "n3", "n4")]}
    first, suspects, good = suspects_and_good(["n1", "n2", "n3", "n4"], groups, failing, lost=["n4"])
    assert (first, suspects, good) == (None, [], [])
    # the same failure without the loss makes n3 and n4 suspects, n1 and n2 good
    assert suspects_and_good(["n1", "n2", "n3", "n4"], groups, failing) == (2, ["n3", "n4"], ["n1", "n2"])
