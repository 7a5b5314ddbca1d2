"""The fabric tests' plans without a cluster: the rail steps' ranks and sweep (``gpuaccept.fabric.nccl_steps``),
a failing rail's second pass (``gpuaccept.fabric.rails``), and each perftest round's step
(``gpuaccept.fabric.schedule``)."""

from __future__ import annotations

import copy
import types
from pathlib import Path

import pytest

from gpuaccept.contracts.nccl_sweep import GroupTable
from gpuaccept.contracts.records import RankRecord
from gpuaccept.dispatch.result import parse_records
from gpuaccept.fabric.affinity import bus_key
from gpuaccept.fabric.nccl_steps import CPU_RAILS, CPU_SWEEP, name_rail_tables, rail_hcas, rail_step
from gpuaccept.fabric.rails import complete_pairs, pair_nodes, pairs_absent, rail_groups_spec, rail_rounds
from gpuaccept.fabric.schedule import Pairing, PerftestPlan, first_pass, round_args, round_nodes, without_lost

pytestmark = pytest.mark.selftest

SWEEP = types.SimpleNamespace(nccl_min_bytes=1 << 20, nccl_max_bytes=1 << 30, nccl_ring=False)
COLLECTIVES = ("all_reduce", "all_gather")
BUS = "0000:1B:00.0"


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
#: a real rank's payload (fixtures/nccl/cpu-vm-gloo-2rank.nccl.out, rank 0): the communicator edited per record
RECORDED = parse_records("nccl", (FIXTURES / "nccl" / "cpu-vm-gloo-2rank.nccl.out").read_text(), 2, ())[0].data


def _record(node: str, rank: int, group: int, rail: int, gpu: dict[str, object] | None) -> RankRecord:
    """A rank of a rail step: the recorded payload with this rank's group and rail (a test edit)."""
    data = copy.deepcopy(RECORDED)
    data["communicator"].update(group=group, rail=rail, group_nodes=[node], group_ranks=[rank])
    return RankRecord(node=node, rank=rank, world_size=4, local_rank=rail, gpu=gpu, data=data)


def test_a_gpu_rail_step_runs_a_rank_per_gpu_on_the_ring_at_the_sessions_sizes() -> None:
    step = rail_step(8, SWEEP, COLLECTIVES)
    assert (step.tasks_per_node, step.gpus_per_task) == (8, 1)
    assert step.args == (
        "--min-bytes=1048576",
        "--max-bytes=1073741824",
        "--ring",  # the rail floors are Ring figures, whatever --nccl-ring says
        "--collectives=all_reduce,all_gather",
        "--rails=all",
    )


def test_a_cpu_rail_step_runs_two_gloo_ranks_on_the_small_sweep() -> None:
    step = rail_step(0, SWEEP, COLLECTIVES)
    assert (step.tasks_per_node, step.gpus_per_task) == (CPU_RAILS, 0)
    assert step.args[: len(CPU_SWEEP)] == CPU_SWEEP
    assert "--ring" not in step.args  # gloo has no algorithm to choose


def test_a_second_pass_step_measures_one_rail_of_node_pairs() -> None:
    pairs = [("n1", "n2"), ("n3", "n4")]
    step = rail_step(8, SWEEP, COLLECTIVES, rail_groups_spec(pairs), "3")
    assert step.args[-2:] == ("--rails=3", "--groups=n1,n2;n3,n4")
    assert pair_nodes(pairs) == ["n1", "n2", "n3", "n4"]


def test_rail_tables_are_named_by_rail_and_their_gpus_lead_to_their_hcas() -> None:
    gpu = {"index": 1, "pci_bus_id": BUS}
    records = [_record("n1", 0, 7, 1, gpu), _record("n2", 1, 7, 1, gpu), _record("n1", 2, 8, 0, None)]
    table = GroupTable(group=7, nodes=("n1", "n2"), ranks=(0, 1))
    name_rail_tables([table], records)
    assert table.info["rail"] == 1
    assert table.info["labels"][1] == "rank 1 (n2 rail 1)"
    affinity = {"n1": {bus_key(BUS): ["mlx5_1", "mlx5_9"]}}
    assert rail_hcas(table, affinity) == {"n1": "mlx5_1", "n2": None}  # n2's GPU has no affine HCA known


def test_two_nodes_cannot_tell_which_end_of_a_rail_is_slow() -> None:
    assert pairs_absent(["n1", "n2"]) == "fails between n1 and n2: two nodes cannot tell which end is slow"
    assert pairs_absent(["n1", "n2", "n3"]) is None
    every = {frozenset(pair) for batch in rail_rounds(["n1", "n2", "n3", "n4"]) for pair in batch}
    assert len(every) == 4  # around the ring: each node meets two partners


def test_a_pair_that_lost_a_node_blames_nobody() -> None:
    pair_ok = {("n1", "n2"): False, ("n3", "n4"): True, ("n2", "n3"): False}
    assert complete_pairs(pair_ok, {"n3": "lost"}) == {("n1", "n2"): False}
    assert complete_pairs(pair_ok, {}) == pair_ok


def test_a_perftest_round_runs_on_the_nodes_it_names() -> None:
    rounds = first_pass({"n1": ["mlx5_0"], "n2": ["mlx5_0"], "n3": ["mlx5_0"]})
    batch = rounds[0]
    assert round_nodes(batch) == sorted({e[0] for p in batch for e in (p.server, p.client)})
    assert round_args(batch, gpu_memory=False) == [f"--plan={','.join(_entry(p) for p in batch)}"]
    assert round_args(batch, gpu_memory=True)[-1] == "--gpu-memory"


def test_a_second_pass_round_leaves_out_pairs_with_a_lost_node() -> None:
    a = Pairing(("n1", "mlx5_0"), ("n2", "mlx5_0"), 18643)
    b = Pairing(("n3", "mlx5_1"), ("n4", "mlx5_1"), 18644)
    assert without_lost([a, b], {"n4": "lost"}) == [a]
    assert without_lost([a, b], {}) == [a, b]


def test_a_perftest_plan_pairs_every_hca_and_names_the_nodes_without_one() -> None:
    rates = {"n1": {"mlx5_1": 400.0, "mlx5_0": 400.0}, "n2": {"mlx5_0": 400.0, "mlx5_1": 400.0}, "n3": {}}
    plan = PerftestPlan.of(rates, ["n1", "n2", "n3"])
    assert plan.hcas == {"n1": ["mlx5_0", "mlx5_1"], "n2": ["mlx5_0", "mlx5_1"], "n3": []}
    assert plan.bare == ["n3"]
    tested = {e for batch in plan.rounds for p in batch for e in (p.server, p.client)}
    assert tested == {("n1", "mlx5_0"), ("n1", "mlx5_1"), ("n2", "mlx5_0"), ("n2", "mlx5_1")}
    assert plan.untested == []
    bad = next(p for batch in plan.rounds for p in batch if p.server[1] == "mlx5_1")
    verdicts = {p: p != bad for batch in plan.rounds for p in batch}
    suspects = {e for batch in plan.second(verdicts) for p in batch for e in (p.server, p.client)}
    assert bad.server in suspects or bad.client in suspects  # the failing pair's ends meet a trusted partner


def _entry(p: Pairing) -> str:
    return f"{p.server[0]}/{p.server[1]}>{p.client[0]}/{p.client[1]}@{p.port}"
