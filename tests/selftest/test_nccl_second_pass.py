"""The second pass re-planned on the nodes left (``nccl.plan.pair_rounds``): a suspect whose known-good partner
is lost during its pair is paired again with a good node still in the run, so it gets the blame a run of the
nodes left gives, never "undetermined" because of the loss (tests/selftest/test_chaos.py holds the real test to
it on the loopback cluster)."""

from __future__ import annotations

import pytest

from gpuaccept.nccl.plan import pair_rounds, plan_rounds

pytestmark = pytest.mark.selftest


def _run(suspects: list[str], good: list[str], dies: dict[str, int]) -> list[list[tuple[str, str]]]:
    """Every round ``pair_rounds`` yields, with ``dies[node]`` = the round in which that node is lost."""
    lost: dict[str, str] = {}
    ran: list[list[tuple[str, str]]] = []
    for pairs in pair_rounds(suspects, good, lambda: lost):
        ran.append(pairs)
        lost.update({n: "its slurmd did not take a step" for n, at in dies.items() if at == len(ran)})
    return ran


def test_without_a_loss_the_rounds_are_plan_rounds():
    assert _run(["n3", "n4"], ["n1", "n2"], {}) == plan_rounds(["n3", "n4"], ["n1", "n2"])


def test_a_suspect_whose_good_partner_is_lost_meets_another_good_node():
    # n3 with n1 (lost during that round), n4 with n2: n3 again with n2; n4's pair was complete
    assert _run(["n3", "n4"], ["n1", "n2"], {"n1": 1}) == [[("n3", "n1"), ("n4", "n2")], [("n3", "n2")]]


def test_a_lost_suspect_and_one_without_partners_left_end_the_pass():
    assert _run(["n3"], ["n1", "n2"], {"n3": 1}) == [[("n3", "n1")]]  # the suspect itself is gone: named elsewhere
    assert _run(["n3"], ["n1", "n2"], {"n1": 1, "n2": 2}) == [[("n3", "n1")], [("n3", "n2")]]  # no good node left


def test_with_no_good_node_the_ring_is_replanned_among_live_suspects():
    # a ring of 4: n1-n2, n2-n3, n3-n4, n1-n4; n2 lost in the first round: n1 and n3 each keep a complete pair
    assert _run(["n1", "n2", "n3", "n4"], [], {"n2": 1}) == plan_rounds(["n1", "n2", "n3", "n4"], [])
    # a ring of 3 where n3 is lost: n1 met n2 already (complete), n2 too: nothing more to run
    assert _run(["n1", "n2", "n3"], [], {"n3": 1}) == plan_rounds(["n1", "n2", "n3"], [])
