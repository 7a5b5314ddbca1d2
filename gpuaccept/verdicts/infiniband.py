"""InfiniBand, its one home: a node's HCAs and ports against its SKU (count, state, rate, error counters
since the last reset), the counters' window over the fabric tests (flaps and error rates while traffic ran),
and which nodes and HCAs the SKU holds to InfiniBand at all. ``test_infiniband``, the fabric tests and the
node check (``nodecheck.gate``) all call the judges and rules here.

sysfs spellings (``/sys/class/infiniband/<hca>/ports/<n>/``): ``state`` ``4: ACTIVE``; ``phys_state``
``5: LinkUp``; ``rate`` ``400 Gb/sec (4X NDR)``; ``link_layer`` ``InfiniBand`` or ``Ethernet`` (RoCE);
``counters/*`` plain integers since the last reset (usually boot).

Which HCAs are the compute fabric: where the SKU sets ``ib_link_layer``, only HCAs with a port of
that link layer count toward ``ib_hca_count`` and are judged port by port; others (a storage or
management NIC driven by mlx5, so also under /sys/class/infiniband) are reported. The link layer of
every port is recorded *before* that filter, so the record shows what each HCA runs; it is judged
through the count: a compute HCA misconfigured to the other link layer is a missing compute HCA (which
is what it is for NCCL), and ``ib_hca_count`` below the SKU's fails. A per-port link-layer check after
the filter could not fail (it would compare the filter's own key with itself), so there is none.

Whether a node must have InfiniBand is its SKU's declaration (``ib_hca_count``, overridable per site):
``expects_ib`` (a limit asking for at least one HCA) decides which nodes the fabric tests pair and hold to
a counter window; ``declares_no_ib`` (no limit, or one that admits only zero: the coverage rule
``declares_absent``) lets a node that shows no HCA skip naming that absence. The compute link layer is the
SKU's ``ib_link_layer`` (``link_layer``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuaccept.contracts.fabric import IbHca, IbPort, InfinibandPayload
from gpuaccept.contracts.ib import parse_rate, parse_state
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.fabric.affinity import compute_hcas
from gpuaccept.fabric.counters import FLAP_COUNTERS, RATE_COUNTERS, error_rate, port_windows
from gpuaccept.thresholds.coverage import declares_absent

__all__ = [
    "COUNTER_METRICS",
    "COUNTER_WINDOW_METRICS",
    "PORT_METRICS",
    "compute_rates",
    "declares_no_ib",
    "expects_ib",
    "fabric_absent",
    "ib_absent",
    "ib_nodes",
    "judge_counter_window",
    "judge_ib",
    "link_layer",
    "no_compute_hca",
    "parse_rate",
    "parse_state",
]

#: sysfs counter file -> metric; the bounds in thresholds.yaml follow rdma-core's ibcheckerrs defaults.
COUNTER_METRICS: dict[str, str] = {
    "symbol_error": "ib_symbol_errors",
    "link_error_recovery": "ib_link_error_recovery",
    "link_downed": "ib_link_downed",
    "port_rcv_errors": "ib_port_rcv_errors",
    "port_rcv_remote_physical_errors": "ib_port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors": "ib_port_rcv_switch_relay_errors",
    "port_xmit_discards": "ib_port_xmit_discards",
    "port_xmit_constraint_errors": "ib_port_xmit_constraint_errors",
    "port_rcv_constraint_errors": "ib_port_rcv_constraint_errors",
    "local_link_integrity_errors": "ib_local_link_integrity_errors",
    "excessive_buffer_overrun_errors": "ib_excessive_buffer_overrun_errors",
    "VL15_dropped": "ib_vl15_dropped",
}
#: what ``judge_ib`` judges against limits: ``test_infiniband``'s ``@pytest.mark.judges``
PORT_METRICS = ("ib_hca_count", "ib_port_state", "ib_port_phys_state", *COUNTER_METRICS.values())
#: what ``judge_counter_window`` judges: ``test_ib_counter_window``'s ``@pytest.mark.judges``
COUNTER_WINDOW_METRICS = (
    "ib_window_link_downed",
    "ib_window_link_error_recovery",
    "ib_window_symbol_error_rate",
    "ib_window_rcv_error_rate",
)


# ---- what the SKU declares ----------------------------------------------------------------------------


def link_layer(judge: JudgeLike, node: str) -> str | None:
    """The node SKU's compute link layer (``ib_link_layer``: InfiniBand, or Ethernet for RoCE); None: any."""
    limit = judge.declared("ib_link_layer", node)
    return None if limit is None else str(limit.equal)


def expects_ib(judge: JudgeLike, node: str) -> bool:
    """The SKU (or site) expects at least one compute HCA on the node. With ``declares_no_ib``, one reading of
    ``ib_hca_count`` in three states: expected (a floor above zero), absent (no limit, or only zero admitted),
    or optional (a limit admitting zero and more: neither function holds, and a node's own HCAs decide)."""
    limit = judge.declared("ib_hca_count", node)
    return limit is not None and bool(limit.min or limit.equal not in (None, 0, 0.0, "0"))


def declares_no_ib(judge: JudgeLike, node: str) -> bool:
    """The SKU declares InfiniBand absent (no ``ib_hca_count`` limit, or one admitting only zero); see
    ``expects_ib`` for the third, optional state."""
    return declares_absent(judge.declared("ib_hca_count", node))


def ib_absent(judge: JudgeLike, node: str, data: InfinibandPayload) -> str | None:
    """Why ``test_infiniband`` does not apply to ``node`` (its ``infiniband`` reading ``data``): the SKU
    declares no InfiniBand and the node shows no HCA; None when it applies."""
    if declares_no_ib(judge, node) and not data["hcas"]:
        return f"SKU {judge.sku(node)} declares no InfiniBand (ib_hca_count) and {node} has no HCA"
    return None


def no_compute_hca(judge: JudgeLike, node: str, what: str) -> str:
    """Why a fabric test leaves out a node whose SKU declares InfiniBand but that shows no compute HCA: the
    absence is ``test_infiniband``'s failure (``ib_hca_count``), and a site file declares a node without it."""
    return (
        f"{node} has no compute HCA, so {what}: its SKU {judge.sku(node)} declares InfiniBand (ib_hca_count, "
        f"ib_link_layer), which test_infiniband judges; a site file declares a node without it: skus.{judge.sku(node)}"
        ".limits.ib_hca_count: {equal: 0, source: ...}"
    )


def compute_rates(
    judge: JudgeLike, ib: Mapping[str, InfinibandPayload], nodes: Iterable[str]
) -> dict[str, dict[str, float]]:
    """``{node: {hca: Gb/s}}`` of each node's active compute HCAs (of its SKU's link layer), from its
    ``infiniband`` reading."""
    return {n: compute_hcas(ib[n], link_layer(judge, n)) for n in nodes}


def fabric_absent(judge: JudgeLike, ib: Mapping[str, InfinibandPayload], nodes: Iterable[str]) -> str | None:
    """Why the fabric's InfiniBand tests do not apply: no node's SKU expects InfiniBand and no node shows
    an HCA; None when they apply."""
    nodes = list(nodes)
    if not any(expects_ib(judge, n) for n in nodes) and not any(ib[n]["hcas"] for n in nodes):
        skus = sorted({judge.sku(n) for n in nodes})
        return f"SKU {', '.join(skus)} declares no InfiniBand (ib_hca_count) and no node has an HCA"
    return None


def ib_nodes(judge: JudgeLike, nodes: Iterable[str], rates: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The nodes an InfiniBand pairing or window holds: those with a compute HCA, and those whose SKU
    expects one (a node of them without one is named, never silently left out)."""
    return [n for n in nodes if rates.get(n) or expects_ib(judge, n)]  # rates: computed here, not a payload


def _port_label(hca: str, port: str) -> str:
    return f"{hca} port {port}"


# ---- ports and their counters since the last reset ----------------------------------------------------


def _compute(hca: IbHca, layer: str | None) -> bool:
    """The HCA has a port of the compute link layer (none declared: every HCA counts)."""
    return layer is None or any(port["link_layer"] == layer for port in hca["ports"].values())


def judge_ib(data: InfinibandPayload, judge: JudgeLike, node: str) -> None:
    """HCA count, port state, rate, link layer and error counters of every compute HCA port.

    The compute HCAs are those of the SKU's ``ib_link_layer`` (none declared: every HCA counts). Ports
    are the checks' ``hca`` subject, ``<hca> port <n>``.
    """
    layer = link_layer(judge, node)
    hcas = data["hcas"]
    for name, hca in sorted(hcas.items()):  # every port, before the filter below (reported, see the docstring)
        for port_name, port in sorted(hca["ports"].items()):
            judge.info(
                "ib_link_layer",
                port["link_layer"] or "unreadable",
                node=node,
                hca=_port_label(name, port_name),
                compute=layer is None or port["link_layer"] == layer,
            )
    compute = {name: hca for name, hca in hcas.items() if _compute(hca, layer)}
    others = sorted(set(hcas) - set(compute))
    judge.check(
        "ib_hca_count",
        len(compute),
        node=node,
        present=data["present"],
        hcas=sorted(compute),
        other_devices=others,
        path=data["path"],
    )
    # HCAs of another link layer (a management Ethernet NIC beside an InfiniBand fabric) are listed in
    # the ib_hca_count check above and not judged port by port.
    for name, hca in sorted(compute.items()):
        for port_name, port in sorted(hca["ports"].items()):
            _judge_port(name, port_name, hca, port, judge, node)


def _judge_port(name: str, port_name: str, hca: IbHca, port: IbPort, judge: JudgeLike, node: str) -> None:
    """One compute port: state, physical state and rate against the SKU, and its error counters."""
    where = _port_label(name, port_name)
    info = {"hca_type": hca["hca_type"], "fw_ver": hca["fw_ver"], "numa_node": hca["numa_node"]}
    if all(port[key] is None for key in ("state", "phys_state", "rate", "link_layer")) and not port["counters"]:
        judge.unreadable("ib_port_state", "no port attributes readable", node=node, hca=where)
        return
    state, phys = port["state"], port["phys_state"]
    judge.check("ib_port_state", parse_state(state) or "unreadable", node=node, hca=where, raw=state, **info)
    judge.check("ib_port_phys_state", parse_state(phys) or "unreadable", node=node, hca=where, raw=phys)
    rate = parse_rate(port["rate"])
    if rate is None:
        judge.unreadable("ib_port_rate_gbps", f"rate {port['rate']!r} is not a rate", node=node, hca=where)
    else:
        judge.check("ib_port_rate_gbps", rate, node=node, hca=where, raw=port["rate"])
    counters = port["counters"]
    if not counters:
        judge.unreadable("ib_symbol_errors", "no error counters under counters/", node=node, hca=where)
    for counter, metric in COUNTER_METRICS.items():
        value = counters[counter] if counter in counters else None
        if isinstance(value, int):
            judge.check(metric, value, node=node, hca=where)


# ---- the counters over the fabric tests ------------------------------------------------------------


def judge_counter_window(before: InfinibandPayload, after: InfinibandPayload, judge: JudgeLike, node: str) -> None:
    """Every compute port's window between two ``infiniband`` readings: flaps (``link_downed``,
    ``link_error_recovery``) and error rates per bit received; a counter that cannot be read, was reset or
    is saturated leaves its figures unreadable, never passed."""
    for w in port_windows(before, after, link_layer(judge, node)):
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
