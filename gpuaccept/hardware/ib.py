"""Parse InfiniBand sysfs values and judge a node's HCAs and ports against its SKU.

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
"""

from __future__ import annotations

from typing import Any

from gpuaccept.contracts.ib import parse_rate, parse_state
from gpuaccept.contracts.judge import JudgeLike

__all__ = ["COUNTER_METRICS", "judge_ib", "parse_rate", "parse_state"]

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


def _port_label(hca: str, port: str) -> str:
    return f"{hca} port {port}"


def judge_ib(data: dict[str, Any], judge: JudgeLike, node: str, link_layer: str | None) -> None:
    """HCA count, port state, rate, link layer and error counters of every compute HCA port.

    ``link_layer`` is the SKU's ``ib_link_layer`` (None: every HCA counts). Ports are the
    checks' ``hca`` subject, ``<hca> port <n>``.
    """
    hcas: dict[str, Any] = data.get("hcas") or {}
    for name, hca in sorted(hcas.items()):  # every port, before the filter below (reported, see the docstring)
        for port_name, port in sorted((hca.get("ports") or {}).items()):
            judge.info(
                "ib_link_layer",
                (port or {}).get("link_layer") or "unreadable",
                node=node,
                hca=_port_label(name, port_name),
                compute=link_layer is None or (port or {}).get("link_layer") == link_layer,
            )
    compute = {
        name: hca
        for name, hca in hcas.items()
        if link_layer is None
        or any((port.get("link_layer") or "") == link_layer for port in (hca.get("ports") or {}).values())
    }
    others = sorted(set(hcas) - set(compute))
    judge.check(
        "ib_hca_count",
        len(compute),
        node=node,
        present=bool(data.get("present")),
        hcas=sorted(compute),
        other_devices=others,
        path=data.get("path"),
    )
    # HCAs of another link layer (a management Ethernet NIC beside an InfiniBand fabric) are listed in
    # the ib_hca_count check above and not judged port by port.
    for name, hca in sorted(compute.items()):
        for port_name, port in sorted((hca.get("ports") or {}).items()):
            where = _port_label(name, port_name)
            info = {"hca_type": hca.get("hca_type"), "fw_ver": hca.get("fw_ver"), "numa_node": hca.get("numa_node")}
            if not port:
                judge.unreadable("ib_port_state", "no port attributes readable", node=node, hca=where)
                continue
            judge.check(
                "ib_port_state",
                parse_state(port.get("state")) or "unreadable",
                node=node,
                hca=where,
                raw=port.get("state"),
                **info,
            )
            judge.check(
                "ib_port_phys_state",
                parse_state(port.get("phys_state")) or "unreadable",
                node=node,
                hca=where,
                raw=port.get("phys_state"),
            )
            rate = parse_rate(port.get("rate"))
            if rate is None:
                judge.unreadable("ib_port_rate_gbps", f"rate {port.get('rate')!r} is not a rate", node=node, hca=where)
            else:
                judge.check("ib_port_rate_gbps", rate, node=node, hca=where, raw=port.get("rate"))
            counters = port.get("counters") or {}
            if not counters:
                judge.unreadable("ib_symbol_errors", "no error counters under counters/", node=node, hca=where)
            for counter, metric in COUNTER_METRICS.items():
                value = counters.get(counter)
                if isinstance(value, int):
                    judge.check(metric, value, node=node, hca=where)
