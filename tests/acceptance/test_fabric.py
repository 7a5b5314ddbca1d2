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

from gpuaccept.contracts.nccl_sweep import algo_args, group_tables
from gpuaccept.errors import MeasurementError
from gpuaccept.fabric import schedule
from gpuaccept.fabric.affinity import affine_hcas, bus_key
from gpuaccept.fabric.rails import rail_groups_spec, rail_label, rail_rounds
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

CPU_RAILS = 2  # gloo ranks per CPU node: two rails
CPU_SWEEP = ["--min-bytes=64K", "--max-bytes=1M", "--iters=5", "--warmup=2"]
_STATE: dict[str, Any] = {}


# ---- helpers ---------------------------------------------------------------------------------------


def _ib(cluster, nodes, counters_only=False) -> dict[str, dict]:
    """The ``infiniband`` probe on every node at once; a node that did not answer is an error, one lost
    during the step is left out (the tests go on without it)."""
    args = ["--counters-only"] if counters_only else []
    out = {}
    for node, result in cluster.run_each(INFINIBAND, nodes, args=args).items():
        if isinstance(result, MeasurementError):
            if node in cluster.lost:
                continue
            raise result
        out[node] = result.one().data
    return out


def _ib_on(cluster, nodes) -> dict[str, dict]:
    """The ``infiniband`` readings of ``nodes`` (the session's first, else taken now); a node lost since
    has none, which raises naming it, so ``cluster.across_nodes`` plans again on the nodes left."""
    ib = _STATE.get("ib") or _ib(cluster, nodes)
    gone = [n for n in nodes if n not in ib]
    if gone:
        raise MeasurementError(f"no InfiniBand reading of {', '.join(gone)}", nodes=tuple(gone))
    return ib


def _fabric(cluster, judge) -> dict[str, dict[str, float]]:
    """``{node: {hca: Gb/s}}`` of the compute HCAs; skips when no node expects or shows InfiniBand."""
    if "ib" not in _STATE:
        _STATE["ib"] = _ib(cluster, cluster.nodes)
    ib = _STATE["ib"]
    nodes = [n for n in cluster.nodes if n in ib]  # a node lost since is out
    if why := fabric_absent(judge, ib, nodes):
        pytest.skip(why)
    return compute_rates(judge, ib, nodes)


def _affinity(cluster, node) -> dict[str, list[str]]:
    """GPU bus -> PCIe-affine HCAs, from the same NVML read test_interconnect uses (one run per node)."""
    gpus = cluster.gpus_on(node)
    data = cluster.run_shared(NVLINK, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one().data
    return affine_hcas(data)


@pytest.fixture(scope="module", autouse=True)
def _counter_window_start(cluster):
    """First IB counter reading, before any fabric traffic of this file (judged by the last test)."""
    try:
        _STATE["ib_before"] = _ib(cluster, cluster.nodes, counters_only=True)
    except MeasurementError as exc:
        _STATE["ib_before"] = exc
    except pytest.skip.Exception:  # dry run
        pass
    yield


def _layout(cluster, node) -> tuple[int, int]:
    gpus = cluster.gpus_on(node)
    return (gpus, 1) if gpus else (CPU_RAILS, 0)


def _sweep(settings, gpu: bool) -> list[str]:
    if not gpu:
        return CPU_SWEEP
    # the rail floors are Ring figures (nccl-tests #290): measured the way they were (algo_args)
    ring = algo_args(gpu=True, multinode=True, forced_ring=settings.nccl_ring)
    return [f"--min-bytes={settings.nccl_min_bytes}", f"--max-bytes={settings.nccl_max_bytes}", *ring]


# ---- GPUDirect ---------------------------------------------------------------------------------------


@pytest.mark.judges(*GDR_METRICS, gpus="gpu", absent="ib")
def test_gdr_enablement(node, cluster, judge):
    """nvidia_peermem or DMA-BUF; ACS Control 0 on the bridges between each GPU and its HCA; IOMMU not translating."""
    gpus = cluster.require_gpus(node)
    if why := gdr_absent(judge, node, _fabric(cluster, judge)[node]):
        pytest.skip(why)
    data = cluster.run(GDR, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one().data
    judge_gdr(data, judge, node)


# ---- NCCL transport ----------------------------------------------------------------------------------


@pytest.mark.judges(*TRANSPORT_METRICS, gpus="gpu", nodes=2, absent="nccl_net")
@pytest.mark.multinode
@pytest.mark.nccl
def test_nccl_transport(cluster, judge):
    """Inter-node NCCL channels use the declared plugin, GDRDMA where expected, each GPU's affine HCA, every HCA."""
    if why := transport_absent(judge, cluster.nodes[0]):
        pytest.skip(why)
    gpus = cluster.require_gpus()

    def measure(nodes: list[str]) -> tuple[dict, dict, Any]:
        """Compute HCAs and GPU -> HCA affinity of the live nodes, and one NCCL job over all their GPUs."""
        ib = _ib_on(cluster, nodes)
        rates = compute_rates(judge, ib, nodes)
        affinity = {n: _affinity(cluster, n) if rates[n] else {} for n in nodes}
        args = ["--collectives=all_reduce", "--min-bytes=64M", "--max-bytes=64M", "--iters=5", "--trials=1"]
        result = cluster.run(NCCL, nodes=nodes, tasks_per_node=gpus, gpus_per_task=1, args=args)
        return rates, affinity, result

    rates, affinity, result = cluster.across_nodes(measure, what="an inter-node NCCL channel")
    judge_transport(result.records, rates, affinity, judge)


# ---- rails -------------------------------------------------------------------------------------------


def _run_rails(cluster, settings, nodes, groups: str = "", rails: str = "all"):
    tasks, gpt = _layout(cluster, nodes[0])
    args = [*_sweep(settings, bool(gpt)), f"--collectives={','.join(RAIL_COLLECTIVES)}", f"--rails={rails}"]
    if groups:
        args.append(f"--groups={groups}")
    result = cluster.run(NCCL, nodes=nodes, tasks_per_node=tasks, gpus_per_task=gpt, args=args)
    by_gid = {r.data.get("group"): r.data.get("rail") for r in result.records}
    tables = group_tables(result.records)
    for table in tables:
        table.info["rail"] = by_gid.get(table.group)
        table.info["gpus"] = {r.node: r.gpu for r in result.records if r.data.get("group") == table.group}
        rail = by_gid.get(table.group)
        table.info["labels"] = {r.rank: f"rank {r.rank} ({r.node} rail {rail})" for r in result.records}
    return tables


def _rail_hcas(table, affinity) -> dict[str, str | None]:
    out = {}
    for node in table.nodes:
        gpu = table.info["gpus"].get(node)
        hcas = affinity.get(node, {}).get(bus_key(gpu["pci_bus_id"])) if gpu else None
        out[node] = hcas[0] if hcas else None
    return out


@pytest.mark.judges(*RAIL_METRICS, nodes=2)
@pytest.mark.multinode
@pytest.mark.nccl
def test_nccl_rails(cluster, judge, settings):
    """Every rail (one GPU per node, split by local rank) at once: busbw per rail, then bad rail ends in pairs."""

    def measure(nodes: list[str]) -> tuple[list[str], dict, dict, list]:
        ib = _ib_on(cluster, nodes)
        rates = compute_rates(judge, ib, nodes)
        affinity = {n: _affinity(cluster, n) if rates[n] and cluster.gpus_on(n) else {} for n in nodes}
        return nodes, rates, affinity, _run_rails(cluster, settings, nodes)

    nodes, rates, affinity, tables = cluster.across_nodes(measure, what="a rail")
    failing = []
    for table in tables:
        hcas = _rail_hcas(table, affinity)
        label = rail_label(table.info["rail"], hcas)
        figures = [f"{c} {row.busbw:.3f} GB/s" for c in RAIL_COLLECTIVES if (row := table.largest(c))]
        print(f"{label}: " + ", ".join(figures))
        if not judge_rail(judge, table, label, rates, hcas):
            failing.append((table.info["rail"], label))
    for rail, label in failing:
        nodes = cluster.nodes  # a node lost since the first pass is not paired
        if len(nodes) < 3:
            print(f"{label} fails between {' and '.join(nodes)}: two nodes cannot tell which end is slow")
            continue
        pair_ok: dict[tuple[str, str], bool] = {}
        for batch in rail_rounds(nodes):
            try:
                spec = rail_groups_spec(batch)
                tables = _run_rails(cluster, settings, [n for p in batch for n in p], spec, str(rail))
            except MeasurementError:
                if not any(n in cluster.lost for p in batch for n in p):
                    raise
                print(f"{label} second pass: {lost_text(cluster.lost)}; its pairs are incomplete")
                continue
            for table in tables:
                where = f"{label} second pass {'+'.join(table.nodes)}"
                ok = judge_rail(judge, table, where, rates, _rail_hcas(table, affinity))
                pair_ok[(table.nodes[0], table.nodes[1])] = ok
        pair_ok = {p: ok for p, ok in pair_ok.items() if not set(p) & set(cluster.lost)}  # incomplete: no blame
        judge_rail_blame(pair_ok, cluster.nodes, label, judge)


# ---- RDMA data path ----------------------------------------------------------------------------------


def _perftest_round(cluster, batch, gpu_memory: bool):
    step_nodes = sorted({e[0] for p in batch for e in (p.server, p.client)})
    gpus = min(cluster.gpus_on(n) for n in step_nodes)
    args = [f"--plan={schedule.format_plan(batch)}"] + (["--gpu-memory"] if gpu_memory else [])
    result = cluster.run(PERFTEST, nodes=step_nodes, tasks_per_node=1, gpus_per_task=gpus, args=args)
    gaps = missing_tools(result.records)
    if gaps:
        why = "; ".join(f"{n}: {why}" for n, why in gaps.items())
        raise MeasurementError(f"perftest cannot run: {why}", nodes=tuple(gaps))
    return pair_results(result.records)


@pytest.mark.judges(*RDMA_METRICS, nodes=2, absent="ib")
@pytest.mark.multinode
def test_rdma_perftest(cluster, judge, settings):
    """ib_write_bw / ib_write_lat for every HCA of every node against a partner HCA, concurrent rounds, second pass."""

    def measure(live: list[str]) -> tuple[dict, list[str], dict, bool, list, dict]:
        rates = _fabric(cluster, judge)
        nodes = ib_nodes(judge, live, rates)
        if len(nodes) < 2:
            pytest.skip("fewer than two nodes with InfiniBand: no pair to test")
        hcas = {n: sorted(rates[n]) for n in nodes}
        gpu_memory = rdma_gpu_memory(judge, nodes[0])
        plan = schedule.first_pass(hcas)
        first: dict[Any, Any] = {}
        for batch in plan:
            first.update(_perftest_round(cluster, batch, gpu_memory))
        return rates, nodes, hcas, gpu_memory, plan, first

    rates, nodes, hcas, gpu_memory, plan, first = cluster.across_nodes(measure, what="an RDMA pair")
    bare = [n for n in nodes if not hcas[n]]
    verdicts = judge_rdma_pairs(judge, first, rates, gpu_memory)
    judge_rdma_unpaired(judge, bare, schedule.untested(hcas, plan), first)  # bare: the SKU expects InfiniBand
    second: dict[Any, bool] = {}
    for batch in schedule.second_pass(verdicts, hcas):
        if any(e[0] in cluster.lost for p in batch for e in (p.server, p.client)):
            print(f"perftest second pass: {lost_text(cluster.lost)}; its pairs are incomplete")
            batch = [p for p in batch if p.server[0] not in cluster.lost and p.client[0] not in cluster.lost]
        if batch:
            results = _perftest_round(cluster, batch, gpu_memory)
            second.update(judge_rdma_pairs(judge, results, rates, gpu_memory))
    judge_hca_blame(judge, verdicts, second, cluster.lost)
    print(f"perftest: {len(first)} pairs in {len(plan)} rounds, {len(second)} re-tests")


# ---- IB counters over the run ------------------------------------------------------------------------


@pytest.mark.judges(*COUNTER_WINDOW_METRICS, nodes=2, absent="ib")
@pytest.mark.multinode
def test_ib_counter_window(cluster, judge):
    """No link went down or retrained while the fabric tests ran; symbol/receive errors per bit within 1e-12."""
    rates = _fabric(cluster, judge)
    before = _STATE.get("ib_before")
    if isinstance(before, MeasurementError) or before is None:
        raise MeasurementError(f"no first IB counter reading to open the window: {before}")
    nodes = [n for n in ib_nodes(judge, cluster.nodes, rates) if n in before]
    bare = [n for n in nodes if not rates.get(n)]
    if nodes and bare == nodes:
        pytest.skip("; ".join(no_compute_hca(judge, n, "no counter window to judge") for n in bare))
    after = _ib(cluster, nodes, counters_only=True)  # a node lost during it is left out
    for node in (n for n in nodes if n in after):
        judge_counter_window(before[node], after[node], judge, node)
