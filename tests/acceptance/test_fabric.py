"""The fabric between nodes: GPUDirect readiness, NCCL's transport, rails, RDMA per HCA, IB counters over the run.

* ``test_gdr_enablement[node]``: nvidia_peermem or DMA-BUF, ACS off between each GPU and its HCA, no
  IOMMU translation (probe ``gdr``).
* ``test_nccl_transport`` (multinode): every GPU of every node in one NCCL job; each rank's NET channels
  must use the plugin the SKU (or site) declares, with GPUDirect RDMA where expected, through the GPU's
  PCIe-affine HCA; every declared HCA carries traffic.
* ``test_nccl_rails`` (multinode): one communicator per rail (local rank), all at once; each rail's busbw
  against its floor and the rail HCA's line rate; a failing rail's nodes re-tested in pairs.
* ``test_rdma_perftest`` (multinode): ib_write_bw / ib_write_lat between every HCA and a partner on
  another node, in rounds, plus a second pass for suspects.
* ``test_ib_counter_window`` (multinode, last): link flaps and error rates between the first reading
  (taken before the first test of this file) and now.

A cluster whose SKU declares no InfiniBand (no ``ib_hca_count``) and shows no HCA skips the IB parts;
the rails run everywhere (gloo on CPU nodes: 2 ranks per node, 2 rails).

Every cross-node step is planned on the nodes still in the run (``cluster.across_nodes``): a node lost
before is left out, a step that loses one is measured again on the survivors, a second-pass pair that
lost a member is incomplete (it clears and blames nobody), fewer than two nodes left skip naming the loss.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuaccept.contracts.fabric import InfinibandPayload
from gpuaccept.contracts.nccl_sweep import GroupTable, group_tables
from gpuaccept.errors import MeasurementError
from gpuaccept.fabric import schedule
from gpuaccept.fabric.affinity import affine_hcas
from gpuaccept.fabric.nccl_steps import TRANSPORT_ARGS, name_rail_tables, rail_figures, rail_hcas, rail_step
from gpuaccept.fabric.rails import complete_pairs, pair_nodes, pairs_absent, rail_groups_spec, rail_label, rail_rounds
from gpuaccept.fabric.rdma import missing_tools, pair_results
from gpuaccept.nccl.plan import lost_text
from gpuaccept.probes.specs import GDR, INFINIBAND, NCCL, NVLINK, PERFTEST
from gpuaccept.verdicts.fabric import (
    GDR_METRICS,
    RAIL_COLLECTIVES,
    RAIL_METRICS,
    RDMA_METRICS,
    TRANSPORT_METRICS,
    gdr_absent,
    judge_gdr,
    judge_hca_blame,
    judge_rail,
    judge_rail_blame,
    judge_rdma_pairs,
    judge_rdma_unpaired,
    judge_transport,
    rdma_gpu_memory,
    transport_absent,
)
from gpuaccept.verdicts.infiniband import (
    COUNTER_WINDOW_METRICS,
    compute_rates,
    fabric_absent,
    ib_nodes,
    judge_counter_window,
    no_compute_hca,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.interconnect]

#: the first InfiniBand readings of every node (``ib_first``): the HCAs each test plans on and the counter
#: window's first end, or why they could not be taken (None: a dry run takes none)
FirstReadings = dict[str, InfinibandPayload] | MeasurementError | None


# ---- helpers ---------------------------------------------------------------------------------------


def _ib(cluster, nodes) -> dict[str, InfinibandPayload]:
    """The ``infiniband`` probe on every node at once; a node that did not answer is an error, one lost
    during the step is left out (the tests go on without it)."""
    out = {}
    for node, result in cluster.run_each(INFINIBAND, nodes).items():
        if isinstance(result, MeasurementError):
            if node in cluster.lost:
                continue
            raise result
        out[node] = INFINIBAND.read(result.one())
    return out


@pytest.fixture(scope="module", autouse=True)
def ib_first(cluster) -> FirstReadings:
    """Every node's InfiniBand reading before any fabric traffic of this file: what the tests plan on (which
    HCAs each node has) and the first end of the counter window the last test judges."""
    try:
        return _ib(cluster, cluster.nodes)
    except MeasurementError as exc:
        return exc
    except pytest.skip.Exception:  # dry run
        return None


def _ib_on(cluster, nodes, first: FirstReadings) -> dict[str, InfinibandPayload]:
    """The ``infiniband`` readings of ``nodes`` (the first ones, else taken now); a node lost since has none,
    which raises naming it, so ``cluster.across_nodes`` plans again on the nodes left."""
    ib = first if isinstance(first, dict) else _ib(cluster, nodes)
    gone = [n for n in nodes if n not in ib]
    if gone:
        raise MeasurementError(f"no InfiniBand reading of {', '.join(gone)}", nodes=tuple(gone))
    return ib


def _fabric(cluster, judge, first: FirstReadings) -> dict[str, dict[str, float]]:
    """``{node: {hca: Gb/s}}`` of the compute HCAs; skips when no node expects or shows InfiniBand."""
    ib = first if isinstance(first, dict) else _ib(cluster, cluster.nodes)
    nodes = [n for n in cluster.nodes if n in ib]  # a node lost since is out
    if why := fabric_absent(judge, ib, nodes):
        pytest.skip(why)
    return compute_rates(judge, ib, nodes)


def _affinity(cluster, node) -> dict[str, list[str]]:
    """GPU bus -> PCIe-affine HCAs, from the same NVML read test_interconnect uses (one run per node)."""
    gpus = cluster.gpus_on(node)
    record = cluster.run_shared(NVLINK, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one()
    return affine_hcas(NVLINK.read(record))


# ---- GPUDirect ---------------------------------------------------------------------------------------


@pytest.mark.judges(*GDR_METRICS, gpus="gpu", absent="ib")
def test_gdr_enablement(node, cluster, judge, ib_first):
    """nvidia_peermem or DMA-BUF; ACS Control 0 on the bridges between each GPU and its HCA; IOMMU not translating."""
    gpus = cluster.require_gpus(node)
    if why := gdr_absent(judge, node, _fabric(cluster, judge, ib_first)[node]):
        pytest.skip(why)
    record = cluster.run(GDR, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one()
    judge_gdr(GDR.read(record), judge, node)


# ---- NCCL transport ----------------------------------------------------------------------------------


@pytest.mark.judges(*TRANSPORT_METRICS, gpus="gpu", nodes=2, absent="nccl_net")
@pytest.mark.multinode
@pytest.mark.nccl
def test_nccl_transport(cluster, judge, ib_first):
    """Inter-node NCCL channels use the declared plugin, GDRDMA where expected, each GPU's affine HCA, every HCA."""
    if why := transport_absent(judge, cluster.nodes[0]):
        pytest.skip(why)
    gpus = cluster.require_gpus()

    def measure(nodes: list[str]) -> tuple[dict, dict, Any]:
        """Compute HCAs and GPU -> HCA affinity of the live nodes, and one NCCL job over all their GPUs."""
        ib = _ib_on(cluster, nodes, ib_first)
        rates = compute_rates(judge, ib, nodes)
        affinity = {n: _affinity(cluster, n) if rates[n] else {} for n in nodes}
        result = cluster.run(NCCL, nodes=nodes, tasks_per_node=gpus, gpus_per_task=1, args=list(TRANSPORT_ARGS))
        return rates, affinity, result

    rates, affinity, result = cluster.across_nodes(measure, what="an inter-node NCCL channel")
    judge_transport([(r, NCCL.read(r)) for r in result.records], rates, affinity, judge)


# ---- rails -------------------------------------------------------------------------------------------


def _run_rails(cluster, settings, nodes, groups: str = "", rails: str = "all") -> list[GroupTable]:
    """One rail step on ``nodes`` (``gpuaccept.fabric.nccl_steps.rail_step``): its tables, one per rail."""
    step = rail_step(cluster.gpus_on(nodes[0]), settings, RAIL_COLLECTIVES, groups, rails)
    args = list(step.args)
    result = cluster.run(
        NCCL, nodes=nodes, tasks_per_node=step.tasks_per_node, gpus_per_task=step.gpus_per_task, args=args
    )
    tables = group_tables(result.records)
    name_rail_tables(tables, result.records)
    return tables


def _rail_pairs(cluster, settings, judge, rail: int, label: str, rates, affinity) -> dict[tuple[str, str], bool]:
    """A failing rail's second pass: its nodes in pairs, a step per round (``rail_rounds``); each pair judged.
    A round that lost a node leaves its pairs incomplete."""
    pair_ok: dict[tuple[str, str], bool] = {}
    for batch in rail_rounds(cluster.nodes):  # a node lost since the first pass is not paired
        try:
            tables = _run_rails(cluster, settings, pair_nodes(batch), rail_groups_spec(batch), str(rail))
        except MeasurementError:
            if not any(n in cluster.lost for n in pair_nodes(batch)):
                raise
            print(f"{label} second pass: {lost_text(cluster.lost)}; its pairs are incomplete")
            continue
        for table in tables:
            where = f"{label} second pass {'+'.join(table.nodes)}"
            pair_ok[(table.nodes[0], table.nodes[1])] = judge_rail(
                judge, table, where, rates, rail_hcas(table, affinity)
            )
    return pair_ok


@pytest.mark.judges(*RAIL_METRICS, nodes=2)
@pytest.mark.multinode
@pytest.mark.nccl
def test_nccl_rails(cluster, judge, settings, ib_first):
    """Every rail (one GPU per node, split by local rank) at once: busbw per rail, then bad rail ends in pairs."""

    def measure(nodes: list[str]) -> tuple[dict, dict, list]:
        ib = _ib_on(cluster, nodes, ib_first)
        rates = compute_rates(judge, ib, nodes)
        affinity = {n: _affinity(cluster, n) if rates[n] and cluster.gpus_on(n) else {} for n in nodes}
        return rates, affinity, _run_rails(cluster, settings, nodes)

    rates, affinity, tables = cluster.across_nodes(measure, what="a rail")
    failing = []
    for table in tables:
        hcas = rail_hcas(table, affinity)
        label = rail_label(table.info["rail"], hcas)
        print(f"{label}: " + rail_figures(table, RAIL_COLLECTIVES))
        if not judge_rail(judge, table, label, rates, hcas):
            failing.append((table.info["rail"], label))
    for rail, label in failing:
        if why := pairs_absent(cluster.nodes):  # a node lost since the first pass is not paired
            print(f"{label} {why}")
            continue
        pair_ok = _rail_pairs(cluster, settings, judge, rail, label, rates, affinity)
        judge_rail_blame(complete_pairs(pair_ok, cluster.lost), cluster.nodes, label, judge)


# ---- RDMA data path ----------------------------------------------------------------------------------


def _perftest_round(cluster, batch, gpu_memory: bool):
    """One round of pairs as one ``perftest`` step (``gpuaccept.fabric.schedule``): each pair's result."""
    nodes = schedule.round_nodes(batch)
    gpus = min(cluster.gpus_on(n) for n in nodes)
    args = schedule.round_args(batch, gpu_memory)
    result = cluster.run(PERFTEST, nodes=nodes, tasks_per_node=1, gpus_per_task=gpus, args=args)
    gaps = missing_tools(result.records)
    if gaps:
        why = "; ".join(f"{n}: {why}" for n, why in gaps.items())
        raise MeasurementError(f"perftest cannot run: {why}", nodes=tuple(gaps))
    return pair_results(result.records)


@pytest.mark.judges(*RDMA_METRICS, nodes=2, absent="ib")
@pytest.mark.multinode
def test_rdma_perftest(cluster, judge, settings, ib_first):
    """ib_write_bw / ib_write_lat for every HCA of every node against a partner HCA, concurrent rounds, second pass."""

    def measure(live: list[str]) -> tuple[dict, schedule.PerftestPlan, bool, dict]:
        rates = _fabric(cluster, judge, ib_first)
        nodes = ib_nodes(judge, live, rates)
        if len(nodes) < 2:
            pytest.skip("fewer than two nodes with InfiniBand: no pair to test")
        plan = schedule.PerftestPlan.of(rates, nodes)
        gpu_memory = rdma_gpu_memory(judge, nodes[0])
        first: dict[Any, Any] = {}
        for batch in plan.rounds:
            first.update(_perftest_round(cluster, batch, gpu_memory))
        return rates, plan, gpu_memory, first

    rates, plan, gpu_memory, first = cluster.across_nodes(measure, what="an RDMA pair")
    verdicts = judge_rdma_pairs(judge, first, rates, gpu_memory)
    judge_rdma_unpaired(judge, plan.bare, plan.untested, first)  # bare: the SKU expects InfiniBand
    second: dict[Any, bool] = {}
    for batch in plan.second(verdicts):
        if (live := schedule.without_lost(batch, cluster.lost)) != batch:
            print(f"perftest second pass: {lost_text(cluster.lost)}; its pairs are incomplete")
        if live:
            results = _perftest_round(cluster, live, gpu_memory)
            second.update(judge_rdma_pairs(judge, results, rates, gpu_memory))
    judge_hca_blame(judge, verdicts, second, cluster.lost)
    print(f"perftest: {len(first)} pairs in {len(plan.rounds)} rounds, {len(second)} re-tests")


# ---- IB counters over the run ------------------------------------------------------------------------


@pytest.mark.judges(*COUNTER_WINDOW_METRICS, nodes=2, absent="ib")
@pytest.mark.multinode
def test_ib_counter_window(cluster, judge, ib_first):
    """No link went down or retrained while the fabric tests ran; symbol/receive errors per bit within 1e-12."""
    rates = _fabric(cluster, judge, ib_first)
    before = ib_first
    if not isinstance(before, dict):
        raise MeasurementError(f"no first IB counter reading to open the window: {before}")
    nodes = [n for n in ib_nodes(judge, cluster.nodes, rates) if n in before]
    bare = [n for n in nodes if not (rates.get(n))]
    if nodes and bare == nodes:
        pytest.skip("; ".join(no_compute_hca(judge, n, "no counter window to judge") for n in bare))
    after = _ib(cluster, nodes)  # a node lost during it is left out
    for node in (n for n in nodes if n in after):
        judge_counter_window(before[node], after[node], judge, node)
