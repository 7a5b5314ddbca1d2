"""Proof of the transport that carried an NVLink domain's collective, from NCCL's own init lines.

A fast all-reduce across a block does not say *how* NCCL moved the bytes: over the multi-node NVLink fabric, or
quietly over the network when IMEX or the fabric was not there. ``NVLS multicast support is available`` is the
hardware's multicast only (NVIDIA/aicr PR #2568), never proof. What proves MNNVL is the communicator line NCCL
prints for every communicator (``comm 0x... rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 1``, parsed
into ``NcclFacts.mnnvl``); a network test inside a block runs with ``NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0`` and
passes only when its channels ran over NET/IB with MNNVL 0 and no NVLS communicator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from gpuaccept.contracts.nccl_payloads import NcclFacts
from gpuaccept.contracts.nccl_sweep import nccl_payload

if TYPE_CHECKING:
    from gpuaccept.contracts.judge import JudgeLike
    from gpuaccept.contracts.records import RankRecord

__all__ = ["TRANSPORT_METRICS", "judge_domain_transport", "seen_transport"]

#: what ``judge_domain_transport`` judges: its test's ``@pytest.mark.judges``
TRANSPORT_METRICS = ("nccl_domain_transport",)
#: the transport each expectation requires, as ``seen_transport`` names it
REQUIRED: dict[str, str] = {"mnnvl": "MNNVL", "net": "NET/IB"}


def seen_transport(facts: NcclFacts) -> str:
    """The transport one rank's init lines prove: ``MNNVL`` (the communicator line's MNNVL 1), ``NET/IB`` (NET/IB
    channels, MNNVL 0 and no NVLS communicator), else what the lines showed (``MNNVL 0, no NET/IB channel``...)."""
    if facts["mnnvl"] is True:
        return "MNNVL"
    net_ib = any(kind.startswith("NET/IB") for kind in facts["transports"])
    if facts["mnnvl"] is False and net_ib and not facts["nvls_comm"]:
        return "NET/IB"
    mnnvl = {True: "MNNVL 1", False: "MNNVL 0", None: "no communicator line with MNNVL"}[facts["mnnvl"]]
    parts = [mnnvl, "NET/IB channels" if net_ib else "no NET/IB channel"]
    if facts["nvls_comm"]:
        parts.append("an NVLS communicator")
    if facts["nvls_available"]:
        parts.append("NVLS multicast available (hardware only)")
    return ", ".join(parts)


def judge_domain_transport(records: Sequence[RankRecord], judge: JudgeLike, *, expect: Literal["mnnvl", "net"]) -> None:
    """Per rank of an ``nccl`` step, the named expectation ``nccl_domain_transport``: the transport its
    NCCL_DEBUG=INFO init lines prove against the one ``expect`` requires (``mnnvl``: the NVLink domain's test;
    ``net``: a network test inside a block, run with ``NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0``).

    ``records`` are the step's rank records, each read as its typed ``NcclRecord`` (``nccl_payload``); a failure
    names the node and rank. A rank with no NCCL log (``--no-nccl-debug``, gloo) or no communicator could not be
    judged: unreadable (ERROR), never a pass."""
    required = REQUIRED[expect]
    for record in records:
        payload = nccl_payload(record)
        where = {"rank": record.rank, "expect": expect}
        if payload["communicator"]["outcome"] != "in_group":
            judge.unreadable(TRANSPORT_METRICS[0], "the rank was in no communicator", node=record.node, **where)
            continue
        facts = payload["nccl"]
        if facts is None:
            why = f"no NCCL_DEBUG=INFO facts ({payload['backend']} backend or --no-nccl-debug): no init lines"
            judge.unreadable(TRANSPORT_METRICS[0], why, node=record.node, **where)
            continue
        judge.expect(TRANSPORT_METRICS[0], seen_transport(facts), required, node=record.node, **where)
