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
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuaccept.errors import MeasurementError
from gpuaccept.fabric import schedule
from gpuaccept.fabric.affinity import affine_hcas, bus_key, compute_hcas, line_rate_gbs
from gpuaccept.fabric.counters import FLAP_COUNTERS, RATE_COUNTERS, error_rate, port_windows
from gpuaccept.fabric.gdr import judge_gdr
from gpuaccept.fabric.rails import rail_groups_spec, rail_label, rail_rounds
from gpuaccept.fabric.rdma import missing_tools, pair_results
from gpuaccept.fabric.transport import hca_usage, observe_rank
from gpuaccept.nccl.blame import attribute
from gpuaccept.nccl.lines import wrong_lines
from gpuaccept.nccl.sweep import algo_args, group_tables

pytestmark = [pytest.mark.acceptance, pytest.mark.interconnect]

CPU_RAILS = 2  # gloo ranks per CPU node: two rails
CPU_SWEEP = ["--min-bytes=64K", "--max-bytes=1M", "--iters=5", "--warmup=2"]
RAIL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
_STATE: dict[str, Any] = {}


# ---- helpers ---------------------------------------------------------------------------------------


def _declares_ib(judge, node) -> bool:
    """The SKU (or site) expects at least one HCA on the node."""
    limit = judge.declared("ib_hca_count", node)
    return limit is not None and bool(limit.min or limit.equal not in (None, 0, 0.0, "0"))


def _link_layer(judge, node) -> str | None:
    limit = judge.declared("ib_link_layer", node)
    return None if limit is None else str(limit.equal)


def _ib(cluster, nodes, counters_only=False) -> dict[str, dict]:
    """The ``infiniband`` probe on every node at once; a node that did not answer is an error."""
    args = ["--counters-only"] if counters_only else []
    out = {}
    for node, result in cluster.run_each("infiniband", nodes, args=args, timeout_s=60).items():
        if isinstance(result, MeasurementError):
            raise result
        out[node] = result.one().data
    return out


def _fabric(cluster, judge) -> dict[str, dict[str, float]]:
    """``{node: {hca: Gb/s}}`` of the compute HCAs; skips when no node expects or shows InfiniBand."""
    if "ib" not in _STATE:
        _STATE["ib"] = _ib(cluster, cluster.nodes)
    ib = _STATE["ib"]
    declared = [n for n in cluster.nodes if _declares_ib(judge, n)]
    if not declared and not any(d.get("hcas") for d in ib.values()):
        skus = sorted({judge.sku(n) for n in cluster.nodes})
        pytest.skip(f"SKU {', '.join(skus)} declares no InfiniBand (ib_hca_count) and no node has an HCA")
    return {n: compute_hcas(ib[n], _link_layer(judge, n)) for n in cluster.nodes}


def _affinity(cluster, node) -> dict[str, list[str]]:
    """GPU bus -> PCIe-affine HCAs, from the same NVML read test_interconnect uses (one run per node)."""
    gpus = cluster.gpus_on(node)
    data = cluster.run_shared("nvlink", nodes=[node], tasks_per_node=1, gpus_per_task=gpus, timeout_s=120).one().data
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


@pytest.mark.judges("gdr_kernel_support", "pcie_acs_ctl", "iommu_translation", gpus="gpu", absent="ib")
def test_gdr_enablement(node, cluster, judge):
    """nvidia_peermem or DMA-BUF; ACS Control 0 on the bridges between each GPU and its HCA; IOMMU not translating."""
    gpus = cluster.require_gpus(node)
    hcas = _fabric(cluster, judge)[node]
    if not hcas and not _declares_ib(judge, node):
        pytest.skip(f"{node}: SKU {judge.sku(node)} declares no InfiniBand and the node has no HCA")
    data = cluster.run("gdr", nodes=[node], tasks_per_node=1, gpus_per_task=gpus, timeout_s=120).one().data
    judge_gdr(data, judge, node)


# ---- NCCL transport ----------------------------------------------------------------------------------


@pytest.mark.judges(
    "nccl_net_transport",
    "nccl_net_gdr",
    "nccl_net_hca_affinity",
    "nccl_net_hca_used",
    gpus="gpu",
    nodes=2,
    absent="nccl_net",
)
@pytest.mark.multinode
@pytest.mark.nccl
def test_nccl_transport(cluster, judge):
    """Inter-node NCCL channels use the declared plugin, GDRDMA where expected, each GPU's affine HCA, every HCA."""
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("the allocation has one node: no inter-node channel")
    if judge.declared("nccl_net_transport", nodes[0]) is None:
        pytest.skip(f"SKU {judge.sku(nodes[0])} declares no NCCL network transport (nccl_net_transport)")
    gpus = cluster.require_gpus()
    ib = _STATE.get("ib") or _ib(cluster, nodes)
    rates = {n: compute_hcas(ib[n], _link_layer(judge, n)) for n in nodes}
    affinity = {n: _affinity(cluster, n) if rates[n] else {} for n in nodes}
    args = ["--collectives=all_reduce", "--min-bytes=64M", "--max-bytes=64M", "--iters=5", "--trials=1"]
    result = cluster.run("nccl", nodes=nodes, tasks_per_node=gpus, gpus_per_task=1, args=args)
    seen = []
    for r in result.records:
        bus = bus_key(r.gpu["pci_bus_id"]) if r.gpu else None
        affine = affinity[r.node].get(bus) if rates[r.node] and bus else None
        net = (r.data.get("nccl") or {}).get("net")
        if net is None:
            raise MeasurementError(f"{r.node} rank {r.rank}: no NCCL_DEBUG=INFO facts to judge", nodes=(r.node,))
        o = observe_rank(net, node=r.node, rank=r.rank, gpu=r.gpu_label, affine=affine, multinode=True)
        seen.append(o)
        info = {"channels": o.channels, "gdr_channels": o.gdr_channels, "hcas": list(o.direct), **o.detail}
        judge.check("nccl_net_transport", o.transport, node=r.node, gpu=r.gpu_label, **info)
        if o.gdr is not None:
            judge.check("nccl_net_gdr", o.gdr, node=r.node, gpu=r.gpu_label, **info)
        if rates[r.node]:
            judge.check("nccl_net_hca_affinity", o.affinity, node=r.node, gpu=r.gpu_label, affine=affine)
    for node, used in hca_usage(seen, {n: list(rates[n]) for n in nodes if rates[n]}).items():
        for hca, flag in used.items():
            judge.check("nccl_net_hca_used", flag, node=node, hca=hca)


# ---- rails -------------------------------------------------------------------------------------------


def _run_rails(cluster, settings, nodes, groups: str = "", rails: str = "all"):
    tasks, gpt = _layout(cluster, nodes[0])
    args = [*_sweep(settings, bool(gpt)), f"--collectives={','.join(RAIL_COLLECTIVES)}", f"--rails={rails}"]
    if groups:
        args.append(f"--groups={groups}")
    result = cluster.run("nccl", nodes=nodes, tasks_per_node=tasks, gpus_per_task=gpt, args=args)
    by_gid = {r.data.get("group"): r.data.get("rail") for r in result.records}
    tables = group_tables(result.records)
    for table in tables:
        table.info["rail"] = by_gid.get(table.group)
        table.info["gpus"] = {r.node: r.gpu for r in result.records if r.data.get("group") == table.group}
        table.info["labels"] = {r.rank: f"rank {r.rank} ({r.node} rail {by_gid.get(table.group)})"
                                for r in result.records}  # fmt: skip
    return tables


def _rail_hcas(table, affinity) -> dict[str, str | None]:
    out = {}
    for node in table.nodes:
        gpu = table.info["gpus"].get(node)
        hcas = affinity.get(node, {}).get(bus_key(gpu["pci_bus_id"])) if gpu else None
        out[node] = hcas[0] if hcas else None
    return out


def _judge_rail(judge, table, label, rates, hcas) -> bool:
    """Busbw per collective on every node of the rail, and the % of the rail HCA's line rate; True = passed."""
    ok = True
    for collective in RAIL_COLLECTIVES:
        row = table.largest(collective)
        if row is None:
            raise MeasurementError(f"{label}: no {collective} result", nodes=table.nodes)
        lines = [line_rate_gbs(rates[n], [hcas[n]]) for n in table.nodes if hcas.get(n) and rates.get(n)]
        for node in table.nodes:
            r = judge.check(f"nccl_rail_{collective}_busbw_gbs", round(row.busbw, 3), node=node, rail=label,
                             rail_index=table.info["rail"], size=row.size, nodes=list(table.nodes))  # fmt: skip
            ok &= r.verdict != "fail"
            if lines and len(lines) == len(table.nodes):
                pct = round(100 * row.busbw / min(lines), 1)
                r = judge.check("nccl_busbw_fabric_pct", pct, node=node, rail=label, collective=collective,
                                 line_rate_gbs=min(lines), scope="rail")  # fmt: skip
                ok &= r.verdict != "fail"
    wrong = sum(count for *_, count, _ in table.wrong_results())
    details = wrong_lines(table, table.info["labels"])
    for node in table.nodes:  # every result of the rail right (the lines name the rank that got it wrong)
        ok &= judge.check("nccl_wrong_elements", wrong, node=node, rail=label, details=details).verdict != "fail"
    return ok


@pytest.mark.judges(
    "nccl_rail_all_reduce_busbw_gbs",
    "nccl_rail_all_gather_busbw_gbs",
    "nccl_rail_reduce_scatter_busbw_gbs",
    "nccl_busbw_fabric_pct",
    "nccl_wrong_elements",
    nodes=2,
)
@pytest.mark.multinode
@pytest.mark.nccl
def test_nccl_rails(cluster, judge, settings):
    """Every rail (one GPU per node, split by local rank) at once: busbw per rail, then bad rail ends in pairs."""
    nodes = cluster.nodes
    if len(nodes) < 2:
        pytest.skip("the allocation has one node: a rail needs two")
    ib = _STATE.get("ib") or _ib(cluster, nodes)
    rates = {n: compute_hcas(ib[n], _link_layer(judge, n)) for n in nodes}
    affinity = {n: _affinity(cluster, n) if rates[n] and cluster.gpus_on(n) else {} for n in nodes}
    failing = []
    for table in _run_rails(cluster, settings, nodes):
        hcas = _rail_hcas(table, affinity)
        label = rail_label(table.info["rail"], hcas)
        print(f"{label}: " + ", ".join(f"{c} {table.largest(c).busbw:.3f} GB/s" for c in RAIL_COLLECTIVES
                                       if table.largest(c)))  # fmt: skip
        if not _judge_rail(judge, table, label, rates, hcas):
            failing.append((table.info["rail"], label))
    for rail, label in failing:
        if len(nodes) < 3:
            print(f"{label} fails between {' and '.join(nodes)}: two nodes cannot tell which end is slow")
            continue
        pair_ok: dict[tuple[str, str], bool] = {}
        for batch in rail_rounds(nodes):
            for table in _run_rails(
                cluster, settings, [n for p in batch for n in p], rail_groups_spec(batch), str(rail)
            ):
                ok = _judge_rail(judge, table, f"{label} second pass {'+'.join(table.nodes)}", rates,
                                 _rail_hcas(table, affinity))  # fmt: skip
                pair_ok[tuple(table.nodes)] = ok  # type: ignore[index]
        for node, blame in attribute(pair_ok, nodes, []).items():
            if blame.verdict != "undetermined":  # undetermined: its rail checks above already failed
                judge.expect("nccl_node_verdict", blame.verdict.replace("_", " ").replace("cleared", "not at fault"),
                             "not at fault", node=node, rail=label, evidence=list(blame.evidence))  # fmt: skip


# ---- RDMA data path ----------------------------------------------------------------------------------


def _perftest_round(cluster, batch, gpu_memory: bool, timeout: float):
    step_nodes = sorted({e[0] for p in batch for e in (p.server, p.client)})
    gpus = min(cluster.gpus_on(n) for n in step_nodes)
    args = [f"--plan={schedule.format_plan(batch)}"] + (["--gpu-memory"] if gpu_memory else [])
    result = cluster.run(
        "perftest", nodes=step_nodes, tasks_per_node=1, gpus_per_task=gpus, args=args, timeout_s=timeout
    )
    gaps = missing_tools(result.records)
    if gaps:
        raise MeasurementError("perftest cannot run: " + "; ".join(f"{n}: {why}" for n, why in gaps.items()),
                               nodes=tuple(gaps))  # fmt: skip
    return pair_results(result.records)


def _judge_pairs(judge, results, rates, gpu_memory) -> dict[Any, bool]:
    verdicts = {}
    for pairing, res in results.items():
        ok = res.ran and not res.errors
        for node, hca in (pairing.server, pairing.client):
            partner = pairing.client if (node, hca) == pairing.server else pairing.server
            where = f"{hca} (with {partner[0]} {partner[1]})"
            if not res.ran:
                continue
            info = {"memory": res.memory, "partner": pairing.label(), "p99_us": res.lat_p99_us}
            for metric, value in (("rdma_write_bw_gbps", round(res.bw_gbps, 2)),
                                  ("rdma_write_bw_pct_of_rate", round(100 * res.bw_gbps / rates[node][hca], 1)),
                                  ("rdma_write_lat_p99_us", res.lat_p99_us),
                                  ("rdma_gpu_memory", int(res.memory == "cuda"))):  # fmt: skip
                if metric == "rdma_gpu_memory" and not gpu_memory:
                    continue
                ok &= judge.check(metric, value, node=node, hca=where, **info).verdict != "fail"
        verdicts[pairing] = ok
    return verdicts


@pytest.mark.judges(
    "rdma_write_bw_gbps", "rdma_write_bw_pct_of_rate", "rdma_write_lat_p99_us", "rdma_gpu_memory", nodes=2, absent="ib"
)
@pytest.mark.multinode
def test_rdma_perftest(cluster, judge, settings):
    """ib_write_bw / ib_write_lat for every HCA of every node against a partner HCA, concurrent rounds, second pass."""
    rates = _fabric(cluster, judge)
    nodes = [n for n in cluster.nodes if rates[n] or _declares_ib(judge, n)]
    if len(nodes) < 2:
        pytest.skip("fewer than two nodes with InfiniBand: no pair to test")
    hcas = {n: sorted(rates[n]) for n in nodes}
    bare = [n for n in nodes if not hcas[n]]
    gpu_memory = judge.declared("rdma_gpu_memory", nodes[0]) is not None
    timeout = 2 * 60 + 30.0
    first: dict[Any, Any] = {}
    plan = schedule.first_pass(hcas)
    for batch in plan:
        first.update(_perftest_round(cluster, batch, gpu_memory, timeout))
    verdicts = _judge_pairs(judge, first, rates, gpu_memory)
    for n in bare:  # the SKU expects InfiniBand (else the node would not be here)
        judge.expect("rdma_pair_ran", f"no active compute HCA (SKU {judge.sku(n)} expects InfiniBand)", "ran", node=n)
    for n, h in schedule.untested(hcas, plan):
        judge.expect("rdma_pair_ran", "no partner HCA on that rail to test with", "ran", node=n, hca=h)
    for p, r in first.items():
        if r.errors:
            judge.expect("rdma_pair_ran", "; ".join(r.errors), "ran", node=p.client[0], hca=p.label())
    second: dict[Any, bool] = {}
    for batch in schedule.second_pass(verdicts, hcas):
        second.update(_judge_pairs(judge, _perftest_round(cluster, batch, gpu_memory, timeout), rates, gpu_memory))
    for (node, hca), blame in schedule.blame(verdicts, second).items():
        judge.expect("rdma_hca_verdict", blame.verdict.replace("_", " ").replace("cleared", "not at fault"),
                     "not at fault", node=node, hca=hca, evidence=list(blame.evidence))  # fmt: skip
    print(f"perftest: {len(first)} pairs in {len(plan)} rounds, {len(second)} re-tests")


# ---- IB counters over the run ------------------------------------------------------------------------


@pytest.mark.judges(
    "ib_window_link_downed",
    "ib_window_link_error_recovery",
    "ib_window_symbol_error_rate",
    "ib_window_rcv_error_rate",
    nodes=2,
    absent="ib",
)
@pytest.mark.multinode
def test_ib_counter_window(cluster, judge):
    """No link went down or retrained while the fabric tests ran; symbol/receive errors per bit within 1e-12."""
    rates = _fabric(cluster, judge)
    nodes = [n for n in cluster.nodes if rates[n] or _declares_ib(judge, n)]
    before = _STATE.get("ib_before")
    if isinstance(before, MeasurementError) or before is None:
        raise MeasurementError(f"no first IB counter reading to open the window: {before}")
    after = _ib(cluster, nodes, counters_only=True)
    for node in nodes:
        for w in port_windows(before[node], after[node], _link_layer(judge, node)):
            for metric, why in w.unread:
                judge.unreadable(metric, why, node=node, hca=w.where)
            info = {"window_s": round(w.seconds, 1)}
            for counter, metric in FLAP_COUNTERS.items():
                if counter in w.deltas:
                    judge.check(metric, w.deltas[counter], node=node, hca=w.where, **info)
            for counter, metric in RATE_COUNTERS.items():
                rate = error_rate(w.deltas[counter], w.bits_received) if counter in w.deltas else None
                if rate is not None:
                    judge.check(metric, rate, node=node, hca=w.where, errors=w.deltas[counter],
                                 bits_received=w.bits_received, **info)  # fmt: skip
