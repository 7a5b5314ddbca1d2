"""The fabric between nodes, its one home: GPUDirect, NCCL's transport, rails and RDMA pairs. Every check of
``tests/acceptance/test_fabric.py`` is recorded here, but the InfiniBand counter window, which is judged
with the rest of InfiniBand (``verdicts.infiniband``).

The tests plan the steps and run the probes (``gdr``, ``nccl``, ``perftest``, ``infiniband``); the
modules beside this one read what they measured into observations (``gdr.observations``,
``transport.observe_rank``, ``rdma.pair_results``) and plan who meets whom (``schedule``, ``rails``); the
judges here hand every figure to the judging core, and say where a test does not apply (``gdr_absent``,
``transport_absent``) and whether RDMA is held to GPU memory (``rdma_gpu_memory``):

* ``judge_gdr``: GPUDirect readiness per GPU and its HCA (kernel support, ACS, IOMMU);
* ``judge_transport``: each rank's NCCL network plugin, GPUDirect RDMA, HCA affinity, and every declared
  HCA used;
* ``judge_rail``, ``judge_rail_blame``: busbw per rail against its floor and the rail HCA's line rate,
  every result right, and a failing rail's nodes blamed from the pairs (``verdicts.nccl_blame.attribute``);
* ``judge_rdma_pairs``, ``judge_rdma_unpaired``, ``judge_hca_blame``: perftest bandwidth, share of line
  rate and p99 latency per HCA pair, what could not be paired, and the second pass's blame.

They record checks and return (``contracts.judge``); what a test needs back (a rail or pair passed)
is returned from the checks' own verdicts, never decided apart from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpuaccept.contracts.fabric import GdrPayload
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.nccl_payloads import NcclRecord
from gpuaccept.contracts.nccl_sweep import GroupTable
from gpuaccept.contracts.records import RankRecord
from gpuaccept.errors import MeasurementError
from gpuaccept.fabric.affinity import bus_key, line_rate_gbs
from gpuaccept.fabric.gdr import observations
from gpuaccept.fabric.rdma import PairResult
from gpuaccept.fabric.schedule import Endpoint, Pairing
from gpuaccept.fabric.transport import RankTransport, hca_usage, observe_rank
from gpuaccept.verdicts.infiniband import expects_ib, no_compute_hca
from gpuaccept.verdicts.nccl_blame import Blame, attribute
from gpuaccept.verdicts.nccl_lines import wrong_lines

__all__ = [
    "GDR_METRICS",
    "RAIL_COLLECTIVES",
    "RAIL_METRICS",
    "RDMA_METRICS",
    "TRANSPORT_METRICS",
    "blame",
    "gdr_absent",
    "judge_gdr",
    "judge_hca_blame",
    "judge_rail",
    "judge_rail_blame",
    "judge_rdma_pairs",
    "judge_rdma_unpaired",
    "judge_transport",
    "rdma_gpu_memory",
    "transport_absent",
]

#: the collectives each rail runs
RAIL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")

#: what each judge here judges: its test's ``@pytest.mark.judges``
GDR_METRICS = ("gdr_kernel_support", "pcie_acs_ctl", "iommu_translation")
TRANSPORT_METRICS = ("nccl_net_transport", "nccl_net_gdr", "nccl_net_hca_affinity", "nccl_net_hca_used")
RAIL_METRICS = (
    *(f"nccl_rail_{c}_busbw_gbs" for c in RAIL_COLLECTIVES),
    "nccl_busbw_fabric_pct",
    "nccl_wrong_elements",
)
RDMA_METRICS = ("rdma_write_bw_gbps", "rdma_write_bw_pct_of_rate", "rdma_write_lat_p99_us", "rdma_gpu_memory")


def _not_at_fault(verdict: str) -> str:
    """The blame's word as the expectation reads it: ``at fault``, ``not at fault``, ``undetermined``."""
    return verdict.replace("_", " ").replace("cleared", "not at fault")


# ---- GPUDirect --------------------------------------------------------------------------------------


def gdr_absent(judge: JudgeLike, node: str, hcas: Mapping[str, float]) -> str | None:
    """Why ``test_gdr_enablement`` does not apply to ``node`` (its compute HCAs ``hcas``): no HCA, and the
    SKU declares none or the node lacks the ones it declares (``test_infiniband`` judges that); None when
    it applies."""
    if hcas:
        return None
    if not expects_ib(judge, node):
        return f"{node}: SKU {judge.sku(node)} declares no InfiniBand and the node has no HCA"
    return no_compute_hca(judge, node, "no GPU -> HCA path to judge")


def judge_gdr(data: GdrPayload, judge: JudgeLike, node: str) -> None:
    """Judge the ``gdr`` probe's readings on ``node``, each one or that it could not be read. (The probe
    reads the PCI bus, which on a host shared by several Slurm nodes holds every node's GPUs, so their
    count is ``test_gpu_health``'s, from NVML; none at all means nothing here could be read.)"""
    if not data["gpus"]:
        why = f"no NVIDIA GPU on the PCI bus under {data['sysfs_root']}"
        judge.unreadable("gdr_kernel_support", why, node=node)
    for o in observations(data):
        if o.why is not None:
            judge.unreadable(o.metric, o.why, node=node, pair=o.gpu)
        else:
            judge.check(o.metric, o.value, node=node, pair=o.gpu, **o.extra)


# ---- NCCL transport ---------------------------------------------------------------------------------


def transport_absent(judge: JudgeLike, node: str) -> str | None:
    """Why ``test_nccl_transport`` does not apply: the SKU of ``node`` (the allocation's first) declares no
    NCCL network transport; None when it applies."""
    if judge.declared("nccl_net_transport", node) is None:
        return f"SKU {judge.sku(node)} declares no NCCL network transport (nccl_net_transport)"
    return None


def judge_transport(
    ranks: Iterable[tuple[RankRecord, NcclRecord]],
    rates: Mapping[str, Mapping[str, float]],
    affinity: Mapping[str, Mapping[str, list[str]]],
    judge: JudgeLike,
) -> None:
    """Every rank of one inter-node NCCL job (each record with its payload: the parsed ``nccl.net`` facts): its plugin,
    GPUDirect RDMA, its GPU's affine HCA (where the node has compute HCAs), then every declared HCA used.

    ``rates``: the compute HCAs per node; ``affinity``: GPU bus -> PCIe-affine HCAs per node. A rank without
    NET facts could not be measured: its transport is recorded unreadable and nothing further is judged."""
    seen: list[RankTransport] = []
    for r, payload in ranks:
        bus = bus_key(r.gpu["pci_bus_id"]) if r.gpu else None
        affine = affinity[r.node][bus] if rates[r.node] and bus is not None and bus in affinity[r.node] else None
        facts = payload["nccl"]
        net = facts["net"] if facts is not None else None
        if net is None:
            why = f"rank {r.rank}: no NCCL_DEBUG=INFO facts to judge"
            judge.unreadable("nccl_net_transport", why, node=r.node, gpu=r.gpu_label)
            return
        o = observe_rank(net, node=r.node, rank=r.rank, gpu=r.gpu_label, affine=affine, multinode=True)
        seen.append(o)
        info = {"channels": o.channels, "gdr_channels": o.gdr_channels, "hcas": list(o.direct), **o.detail}
        judge.check("nccl_net_transport", o.transport, node=r.node, gpu=r.gpu_label, **info)
        if o.gdr is not None:
            judge.check("nccl_net_gdr", o.gdr, node=r.node, gpu=r.gpu_label, **info)
        if rates[r.node]:
            judge.check("nccl_net_hca_affinity", o.affinity, node=r.node, gpu=r.gpu_label, affine=affine)
    for node, used in hca_usage(seen, {n: list(rates[n]) for n in rates if rates[n]}).items():
        for hca, flag in used.items():
            judge.check("nccl_net_hca_used", flag, node=node, hca=hca)


# ---- rails ------------------------------------------------------------------------------------------


def judge_rail(
    judge: JudgeLike,
    table: GroupTable,
    label: str,
    rates: Mapping[str, Mapping[str, float]],
    hcas: Mapping[str, str | None],
) -> bool:
    """Busbw per collective on every node of the rail, and the % of the rail HCA's line rate; every result
    right (the lines name the rank that got it wrong). True when none of these checks failed.

    A rail without one of its collectives could not be measured (``MeasurementError``)."""
    ok = True
    for collective in RAIL_COLLECTIVES:
        row = table.largest(collective)
        if row is None:
            raise MeasurementError(f"{label}: no {collective} result", nodes=table.nodes)
        lines = [line_rate_gbs(rates[n], [hca]) for n in table.nodes if (hca := hcas[n]) and n in rates and rates[n]]
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
    for node in table.nodes:
        ok &= judge.check("nccl_wrong_elements", wrong, node=node, rail=label, details=details).verdict != "fail"
    return ok


def judge_rail_blame(
    pair_ok: Mapping[tuple[str, str], bool], nodes: Sequence[str], label: str, judge: JudgeLike
) -> None:
    """A failing rail's second pass: each node's blame from the pairs it ran (complete pairs only). An
    undetermined node gets no verdict: its rail checks above already failed."""
    for node, verdict in attribute(pair_ok, nodes, []).items():
        if verdict.verdict != "undetermined":
            evidence = list(verdict.evidence)
            judge.expect(
                "nccl_node_verdict",
                _not_at_fault(verdict.verdict),
                "not at fault",
                node=node,
                rail=label,
                evidence=evidence,
            )


# ---- RDMA data path ---------------------------------------------------------------------------------


def rdma_gpu_memory(judge: JudgeLike, node: str) -> bool:
    """Whether the SKU of ``node`` holds RDMA to GPU memory (it declares ``rdma_gpu_memory``): perftest then
    runs on GPU buffers and ``judge_rdma_pairs`` judges that it did."""
    return judge.declared("rdma_gpu_memory", node) is not None


def judge_rdma_pairs(
    judge: JudgeLike,
    results: Mapping[Pairing, PairResult],
    rates: Mapping[str, Mapping[str, float]],
    gpu_memory: bool,
) -> dict[Pairing, bool]:
    """Both ends of every HCA pair that ran: write bandwidth, its share of the HCA's rate, p99 latency and
    (where the SKU declares it) GPU memory used. Returns each pair's verdict: ran, no error, no check
    failed (what the second pass and the blame read)."""
    verdicts = {}
    for pairing, res in results.items():
        ok = res.ran and not res.errors
        for node, hca in (pairing.server, pairing.client):
            partner = pairing.client if (node, hca) == pairing.server else pairing.server
            where = f"{hca} (with {partner[0]} {partner[1]})"
            bw, p99 = res.bw_gbps, res.lat_p99_us
            if bw is None or p99 is None:  # did not run (``res.ran``): its error is judged apart
                continue
            info = {"memory": res.memory, "partner": pairing.label(), "p99_us": p99}
            figures = [
                ("rdma_write_bw_gbps", round(bw, 2)),
                ("rdma_write_bw_pct_of_rate", round(100 * bw / rates[node][hca], 1)),
                ("rdma_write_lat_p99_us", p99),
            ]
            if gpu_memory:
                figures.append(("rdma_gpu_memory", int(res.memory == "cuda")))
            for metric, value in figures:
                ok &= judge.check(metric, value, node=node, hca=where, **info).verdict != "fail"
        verdicts[pairing] = ok
    return verdicts


def judge_rdma_unpaired(
    judge: JudgeLike,
    bare: Iterable[str],
    untested: Iterable[tuple[str, str]],
    first: Mapping[Pairing, PairResult],
) -> None:
    """What the first pass could not test, each an expectation that fails naming it: a node whose SKU
    expects InfiniBand with no active compute HCA, an HCA with no partner on its rail, a pair that erred."""
    for n in bare:
        judge.expect("rdma_pair_ran", f"no active compute HCA (SKU {judge.sku(n)} expects InfiniBand)", "ran", node=n)
    for n, h in untested:
        judge.expect("rdma_pair_ran", "no partner HCA on that rail to test with", "ran", node=n, hca=h)
    for p, r in first.items():
        if r.errors:
            judge.expect("rdma_pair_ran", "; ".join(r.errors), "ran", node=p.client[0], hca=p.label())


def blame(first: Mapping[Pairing, bool], second: Mapping[Pairing, bool]) -> dict[Endpoint, Blame]:
    """The perftest second pass's verdict per suspect end (``fabric.schedule`` plans both passes):
    ``at_fault`` (failed with a trusted partner), ``cleared``, ``undetermined``."""
    key = "{}/{}".format
    failed = {e for p, ok in first.items() if not ok for e in (p.server, p.client)}
    good = {key(*e) for p, ok in first.items() if ok for e in (p.server, p.client)} - {key(*e) for e in failed}
    pairs = {(key(*p.server), key(*p.client)): ok for p, ok in second.items()}
    verdicts = attribute(pairs, [key(*e) for e in sorted(failed)], sorted(good))
    return {e: verdicts[key(*e)] for e in sorted(failed)}


def judge_hca_blame(
    judge: JudgeLike, first: Mapping[Pairing, bool], second: Mapping[Pairing, bool], lost: Iterable[str]
) -> None:
    """Every suspect HCA's blame from the two passes (``blame``); a lost node's HCAs blame nobody."""
    gone = set(lost)
    for (node, hca), verdict in blame(first, second).items():
        if node in gone:
            continue
        evidence = list(verdict.evidence)
        judge.expect(
            "rdma_hca_verdict", _not_at_fault(verdict.verdict), "not at fault", node=node, hca=hca, evidence=evidence
        )
