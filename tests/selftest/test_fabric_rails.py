"""Rails: the split by local rank (nccl-tests' MOD semantics), naming, per-rail bisection, the probe over gloo,
and the fabric limits the rail and multi-node judgements use."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaccept.contracts.nccl_sweep import group_tables
from gpuaccept.dispatch.result import parse_records
from gpuaccept.fabric.rails import parse_rails, rail_groups_spec, rail_label, rail_rounds, split_rails
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.nccl_blame import attribute

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]


def test_split_by_local_rank_is_nccl_tests_mod_split() -> None:
    """With Slurm's block layout (8 ranks per node), local rank == rank % 8: nccl-tests' 'MOD 8' colour."""
    world, per_node = 32, 8
    local = [r % per_node for r in range(world)]
    rails = split_rails([list(range(world))], local)
    assert [rail for rail, _ in rails] == list(range(8))
    for rail, ranks in rails:
        assert ranks == [r for r in range(world) if r % 8 == rail]  # one GPU per node per rail
    cyclic = [r // 4 for r in range(world)]  # a cyclic layout: the split still follows the local rank
    assert split_rails([list(range(world))], cyclic)[0] == (0, [0, 1, 2, 3])


def test_rails_within_node_groups_and_a_subset() -> None:
    local = [0, 1, 0, 1, 0, 1, 0, 1]  # 4 nodes x 2 ranks
    assert split_rails([[0, 1, 2, 3], [4, 5, 6, 7]], local) == [(0, [0, 2]), (1, [1, 3]), (0, [4, 6]), (1, [5, 7])]
    assert split_rails([[0, 1, 2, 3], [4, 5, 6, 7]], local, {1}) == [(1, [1, 3]), (1, [5, 7])]
    assert split_rails([[0, 1]], local) == []  # one node: no rail has a peer
    assert parse_rails("all") is None and parse_rails("0, 3") == {0, 3}
    with pytest.raises(ValueError, match="expected 'all'"):
        parse_rails("mod8")


def test_rail_names() -> None:
    assert rail_label(3, {"n1": "mlx5_3", "n2": "mlx5_3"}) == "rail 3 (mlx5_3)"
    assert rail_label(3, {"n1": "mlx5_3", "n2": "mlx5_4"}) == "rail 3 (n1 mlx5_3, n2 mlx5_4)"
    assert rail_label(1, {"n1": None, "n2": None}) == "rail 1"


def test_failing_rail_bisected_to_the_node() -> None:
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    rounds = rail_rounds(nodes)
    pairs = [p for batch in rounds for p in batch]
    assert all(len({n for p in batch for n in p}) == 2 * len(batch) for batch in rounds)  # disjoint per round
    assert rail_groups_spec(rounds[0]).count(";") == len(rounds[0]) - 1
    outcome = {p: "n4" not in p for p in pairs}  # n4's HCA on this rail is slow
    verdicts = attribute(outcome, nodes, [])
    assert verdicts["n4"].verdict == "at_fault" and verdicts["n3"].verdict == "cleared"


def test_fabric_limits_have_sources_for_the_reference_skus() -> None:
    t = load_thresholds()
    for sku in ("H100-SXM-80GB", "H200"):
        limits = t.limits_for(sku)
        for metric in (
            "nccl_all_reduce_busbw_multinode_gbs",
            "nccl_all_gather_busbw_multinode_gbs",
            "nccl_reduce_scatter_busbw_multinode_gbs",
            "nccl_rail_all_reduce_busbw_gbs",
            "rdma_write_bw_gbps",
            "rdma_write_bw_pct_of_rate",
            "rdma_write_lat_p99_us",
            "nccl_busbw_fabric_pct",
            "nccl_net_transport",
            "nccl_net_gdr",
        ):
            assert metric in limits and ("issue" in limits[metric].source or "/" in limits[metric].source), metric
        assert limits["nccl_all_reduce_busbw_multinode_gbs"].min == 330
    assert t.limits_for("H100-SXM-80GB")["rdma_write_bw_gbps"].min == 380
    assert t.limits_for("H200")["rdma_write_bw_gbps"].min == 360
    cpu = t.limits_for("cpu")
    assert all(f"nccl_rail_{c}_busbw_gbs" in cpu for c in ("all_reduce", "all_gather", "reduce_scatter"))
    assert "docs/measurements.md" in cpu["nccl_rail_all_reduce_busbw_gbs"].source


def test_probe_reports_rails_over_gloo() -> None:
    """Two 'nodes' x two gloo ranks: two rails, each with one rank per node, measured side by side."""
    port = str(random.randrange(30000, 60000))
    procs = []
    for rank in range(4):
        node, local = f"node{rank // 2 + 1}", rank % 2
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "4",
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "GPUACCEPT_NODE": node,
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
        }
        for var in ("SLURMD_NODENAME", "SLURM_PROCID", "SLURM_JOB_ID"):
            env.pop(var, None)
        argv = [sys.executable, "-m", "gpuaccept.probes.nccl", "--backend=gloo", "--rails=all", "--min-bytes=64K"]
        argv += ["--max-bytes=64K", "--iters=2", "--warmup=1", "--trials=1", "--collectives=all_reduce,all_gather"]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=180) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    records = [parse_records("nccl", out, 1, ("node",))[0] for out, _ in outs]
    assert [r.data["communicator"]["rail"] for r in records] == [0, 1, 0, 1]
    tables = group_tables(records)
    assert [(t.nodes, t.ranks) for t in tables] == [(("node1", "node2"), (0, 2)), (("node1", "node2"), (1, 3))]
    rows = [t.largest("all_reduce") for t in tables]
    assert all(row is not None and row.busbw > 0 for row in rows) and not any(t.wrong_results() for t in tables)
