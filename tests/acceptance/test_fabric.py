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
from gpuaccept.nccl.plan import lost_text
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


def _no_hca(judge, node, what: str) -> str:
    """Why a test skips a node whose SKU declares InfiniBand but that shows no compute HCA: the absence is
    test_infiniband's failure (``ib_hca_count``), and a site file declares a node without it."""
    return (
        f"{node} has no compute HCA, so {what}: its SKU {judge.sku(node)} declares InfiniBand (ib_hca_count, "
        f"ib_link_layer), which test_infiniband judges; a site file declares a node without it: skus.{judge.sku(node)}"
        ".limits.ib_hca_count: {equal: 0, source: ...}"
    )


def _link_layer(judge, node) -> str | None:
    limit = judge.declared("ib_link_layer", node)
    return None if limit is None else str(limit.equal)


def _ib(cluster, nodes, counters_only=False) -> dict[str, dict]:
    """The ``infiniband`` probe on every node at once; a node that did not answer is an error, one lost
    during the step is left out (the tests go on without it)."""
    args = ["--counters-only"] if counters_only else []
    out = {}
    for node, result in cluster.run_each("infiniband", nodes, args=args, timeout_s=60).items():
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
    declared = [n for n in nodes if _declares_ib(judge, n)]
    if not declared and not any(ib[n].get("hcas") for n in nodes):
        skus = sorted({judge.sku(n) for n in nodes})
        pytest.skip(f"SKU {', '.join(skus)} declares no InfiniBand (ib_hca_count) and no node has an HCA")
    return {n: compute_hcas(ib[n], _link_layer(judge, n)) for n in nodes}


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
    if not hcas:
        pytest.skip(_no_hca(judge, node, "no GPU -> HCA path to judge"))
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
    first = cluster.nodes[0]
    if judge.declared("nccl_net_transport", first) is None:
        pytest.skip(f"SKU {judge.sku(first)} declares no NCCL network transport (nccl_net_transport)")
    gpus = cluster.require_gpus()

    def measure(nodes: list[str]) -> tuple[list[str], dict, dict, Any]:
        ib = _ib_on(cluster, nodes)
        rates = {n: compute_hcas(ib[n], _link_layer(judge, n)) for n in nodes}
        affinity = {n: _affinity(cluster, n) if rates[n] else {} for n in nodes}
        args = ["--collectives=all_reduce", "--min-bytes=64M", "--max-bytes=64M", "--iters=5", "--trials=1"]
        result = cluster.run("nccl", nodes=nodes, tasks_per_node=gpus, gpus_per_task=1, args=args)
        return nodes, rates, affinity, result

    nodes, rates, affinity, result = cluster.across_nodes(measure, what="an inter-node NCCL channel")
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


def _judge_rail(judge, table, label, rates, hcas) -> bool:
    """Busbw per collective on every node of the rail, and the % of the rail HCA's line rate; True = passed."""
    ok = True
    for collective in RAIL_COLLECTIVES:
        row = table.largest(collective)
        if row is None:
            raise MeasurementError(f"{label}: no {collective} result", nodes=table.nodes)
        lines = [line_rate_gbs(rates[n], [hcas[n]]) for n in table.nodes if hcas.get(n) and rates.get(n)]
        for node in table.nodes:
            r = judge.check(
                f"nccl_rail_{collective}_busbw_gbs",
                round(row.busbw, 3),
                node=node,
                rail=label,
                rail_index=table.info["rail"],
                size=row.size,
                nodes=list(table.nodes),
            )
            ok &= r.verdict != "fail"
            if lines and len(lines) == len(table.nodes):
                pct = round(100 * row.busbw / min(lines), 1)
                r = judge.check(
                    "nccl_busbw_fabric_pct",
                    pct,
                    node=node,
                    rail=label,
                    collective=collective,
                    line_rate_gbs=min(lines),
                    scope="rail",
                )
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

    def measure(nodes: list[str]) -> tuple[list[str], dict, dict, list]:
        ib = _ib_on(cluster, nodes)
        rates = {n: compute_hcas(ib[n], _link_layer(judge, n)) for n in nodes}
        affinity = {n: _affinity(cluster, n) if rates[n] and cluster.gpus_on(n) else {} for n in nodes}
        return nodes, rates, affinity, _run_rails(cluster, settings, nodes)

    nodes, rates, affinity, tables = cluster.across_nodes(measure, what="a rail")
    failing = []
    for table in tables:
        hcas = _rail_hcas(table, affinity)
        label = rail_label(table.info["rail"], hcas)
        figures = [f"{c} {row.busbw:.3f} GB/s" for c in RAIL_COLLECTIVES if (row := table.largest(c))]
        print(f"{label}: " + ", ".join(figures))
        if not _judge_rail(judge, table, label, rates, hcas):
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
                ok = _judge_rail(judge, table, where, rates, _rail_hcas(table, affinity))
                pair_ok[(table.nodes[0], table.nodes[1])] = ok
        pair_ok = {p: ok for p, ok in pair_ok.items() if not set(p) & set(cluster.lost)}  # incomplete: no blame
        for node, blame in attribute(pair_ok, cluster.nodes, []).items():
            if blame.verdict != "undetermined":  # undetermined: its rail checks above already failed
                verdict = blame.verdict.replace("_", " ").replace("cleared", "not at fault")
                evidence = list(blame.evidence)
                judge.expect("nccl_node_verdict", verdict, "not at fault", node=node, rail=label, evidence=evidence)


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
        why = "; ".join(f"{n}: {why}" for n, why in gaps.items())
        raise MeasurementError(f"perftest cannot run: {why}", nodes=tuple(gaps))
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
            figures = [
                ("rdma_write_bw_gbps", round(res.bw_gbps, 2)),
                ("rdma_write_bw_pct_of_rate", round(100 * res.bw_gbps / rates[node][hca], 1)),
                ("rdma_write_lat_p99_us", res.lat_p99_us),
            ]
            if gpu_memory:
                figures.append(("rdma_gpu_memory", int(res.memory == "cuda")))
            for metric, value in figures:
                ok &= judge.check(metric, value, node=node, hca=where, **info).verdict != "fail"
        verdicts[pairing] = ok
    return verdicts


@pytest.mark.judges(
    "rdma_write_bw_gbps", "rdma_write_bw_pct_of_rate", "rdma_write_lat_p99_us", "rdma_gpu_memory", nodes=2, absent="ib"
)
@pytest.mark.multinode
def test_rdma_perftest(cluster, judge, settings):
    """ib_write_bw / ib_write_lat for every HCA of every node against a partner HCA, concurrent rounds, second pass."""
    timeout = 2 * 60 + 30.0

    def measure(live: list[str]) -> tuple[dict, list[str], dict, bool, list, dict]:
        rates = _fabric(cluster, judge)
        nodes = [n for n in live if rates.get(n) or _declares_ib(judge, n)]
        if len(nodes) < 2:
            pytest.skip("fewer than two nodes with InfiniBand: no pair to test")
        hcas = {n: sorted(rates[n]) for n in nodes}
        gpu_memory = judge.declared("rdma_gpu_memory", nodes[0]) is not None
        plan = schedule.first_pass(hcas)
        first: dict[Any, Any] = {}
        for batch in plan:
            first.update(_perftest_round(cluster, batch, gpu_memory, timeout))
        return rates, nodes, hcas, gpu_memory, plan, first

    rates, nodes, hcas, gpu_memory, plan, first = cluster.across_nodes(measure, what="an RDMA pair")
    bare = [n for n in nodes if not hcas[n]]
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
        if any(e[0] in cluster.lost for p in batch for e in (p.server, p.client)):
            print(f"perftest second pass: {lost_text(cluster.lost)}; its pairs are incomplete")
            batch = [p for p in batch if p.server[0] not in cluster.lost and p.client[0] not in cluster.lost]
        if batch:
            second.update(_judge_pairs(judge, _perftest_round(cluster, batch, gpu_memory, timeout), rates, gpu_memory))
    for (node, hca), blame in schedule.blame(verdicts, second).items():
        if node in cluster.lost:
            continue
        verdict = blame.verdict.replace("_", " ").replace("cleared", "not at fault")
        evidence = list(blame.evidence)
        judge.expect("rdma_hca_verdict", verdict, "not at fault", node=node, hca=hca, evidence=evidence)
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
    before = _STATE.get("ib_before")
    if isinstance(before, MeasurementError) or before is None:
        raise MeasurementError(f"no first IB counter reading to open the window: {before}")
    nodes = [n for n in cluster.nodes if (rates.get(n) or _declares_ib(judge, n)) and n in before]
    bare = [n for n in nodes if not rates.get(n)]
    if nodes and bare == nodes:
        pytest.skip("; ".join(_no_hca(judge, n, "no counter window to judge") for n in bare))
    after = _ib(cluster, nodes, counters_only=True)  # a node lost during it is left out
    for node in (n for n in nodes if n in after):
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
                    judge.check(
                        metric,
                        rate,
                        node=node,
                        hca=w.where,
                        errors=w.deltas[counter],
                        bits_received=w.bits_received,
                        **info,
                    )
