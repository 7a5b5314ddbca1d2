"""Proof of the transport an NVLink domain's collective used, from NCCL's init lines (issue 56, item 6).

``judge_domain_transport`` passes a rank only on the line that proves its transport: the communicator line's
``MNNVL 1`` (expect mnnvl) or NET/IB channels with MNNVL 0 and no NVLS communicator (expect net). The logs:
``fixtures/nccl/gb200-nccl1769-init.log``, ``h100-nccltests213-init.log`` and ``gb200-nccl2303-mnnvl-{on,off}.log``
(one GB200 tray, ``MNNVL 1`` and ``MNNVL 0``) are published lines (README); the 2-node GB200 init below is built in
NCCL's own format strings (``src/init.cc``'s communicator line, ``src/transport/net.cc``'s channel line), as no
published log across two trays was found (README).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.nccl.ncclinfo import parse_nccl_log
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.nccl_transport import judge_domain_transport

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
#: rank 5 of a 2 x 4 GB200 communicator: NCCL's init.cc and net.cc lines as they print them (synthesised)
MNNVL_INIT = """\
gb200-n2:4242:4300 [1] NCCL INFO NCCL version 2.27.5+cuda12.9
gb200-n2:4242:4300 [1] NCCL INFO MNNVL busId 0x901000 fabric UUID 3143b15bc2cd192b.28cc9b5473fb5b93 cliqueId 0x7ffe state 3 healthMask 0x0
gb200-n2:4242:4300 [1] NCCL INFO NVLS multicast support is available on dev 1
gb200-n2:4242:4300 [1] NCCL INFO comm 0xaaaae1d2c6f0 rank 5 nRanks 8 nNodes 2 localRanks 4 localRank 1 MNNVL 1
gb200-n2:4242:4300 [1] NCCL INFO NVLS comm 0xaaaae1d2c6f0 headRank 1 nHeads 4 buffSize 1048576 memSize 2097152 nvlsPerRankSize 201326592 nvlsTotalSize 805306368
"""  # noqa: E501
NET_INIT = """\
gb200-n2:4242:4300 [1] NCCL INFO NCCL_MNNVL_ENABLE set by environment to 0.
gb200-n2:4242:4300 [1] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.
gb200-n2:4242:4300 [1] NCCL INFO NVLS multicast support is available on dev 1
gb200-n2:4242:4300 [1] NCCL INFO comm 0xaaaae1d2c6f0 rank 5 nRanks 8 nNodes 2 localRanks 4 localRank 1 MNNVL 0
gb200-n2:4242:4300 [1] NCCL INFO Channel 00/0 : 1[1] -> 5[1] [receive] via NET/IB/1/GDRDMA
gb200-n2:4242:4300 [1] NCCL INFO Channel 00/0 : 5[1] -> 1[1] [send] via NET/IB/1/GDRDMA
"""


def _record(text: str, rank: int = 5, node: str = "gb200-n2") -> RankRecord:
    """One rank's ``nccl`` record whose facts are ``text`` parsed as the probe parses its log."""
    parsed = parse_nccl_log(text)
    facts: dict[str, Any] = {
        "version": parsed.get("version"),
        "network": parsed.get("network"),
        "ranks": parsed.get("ranks"),
        "nodes": parsed.get("nodes"),
        "local_ranks": parsed.get("local_ranks"),
        "mnnvl": parsed.get("mnnvl"),
        "nvls_available": parsed.get("nvls_available"),
        "nvls_comm": parsed.get("nvls_comm", False),
        "nics": [],
        "nics_by_plugin": {},
        "transports": parsed.get("transports", {}),
        "env": parsed.get("env", {}),
        "algorithms": {},
        "net": None,
    }
    comm = {
        "outcome": "in_group",
        "group": 0,
        "rail": None,
        "group_nodes": ["gb200-n1", node],
        "group_ranks": list(range(8)),
        "results": [],
        "capped": {},
        "free_bytes": 1 << 30,
    }
    data = {
        "backend": "nccl",
        "torch": "2.10.0",
        "world_size": 8,
        "groups": 1,
        "local_rank": 1,
        "ring": False,
        "iters": 20,
        "warmup": 5,
        "trials": 3,
        "faults": None,
        "nccl_version": "2.27.5",
        "env": {},
        "communicator": comm,
        "nccl": facts,
    }
    return RankRecord(node, rank, 8, 1, None, data)


@pytest.fixture()
def judge() -> Judge:
    return Judge(load_thresholds(), lambda node: "GB200", lambda result: None, "selftest")


def _verdicts(judge: Judge) -> list[tuple[str, str, str]]:
    return [(r.verdict, r.node, r.reason) for r in judge.results if r.metric == "nccl_domain_transport"]


def test_the_mnnvl_communicator_line_passes(judge: Judge) -> None:
    judge_domain_transport([_record(MNNVL_INIT)], judge, expect="mnnvl")
    assert _verdicts(judge) == [("pass", "gb200-n2", "")]


def test_the_same_log_without_the_mnnvl_line_fails_naming_node_and_rank(judge: Judge) -> None:
    text = "\n".join(line for line in MNNVL_INIT.splitlines() if " MNNVL 1" not in line)
    judge_domain_transport([_record(text)], judge, expect="mnnvl")
    ((verdict, node, reason),) = _verdicts(judge)
    assert verdict == "fail" and node == "gb200-n2" and "no communicator line with MNNVL" in reason
    (result,) = [r for r in judge.results if r.metric == "nccl_domain_transport"]
    assert "5" in str(result.subject) or result.extra.get("rank") == 5


def test_nvls_multicast_available_alone_is_not_proof(judge: Judge) -> None:
    text = "gb200-n2:1:1 [1] NCCL INFO NVLS multicast support is available on dev 1\n"
    judge_domain_transport([_record(text)], judge, expect="mnnvl")
    ((verdict, _, reason),) = _verdicts(judge)
    assert verdict == "fail" and "hardware only" in reason


def test_a_net_ib_log_passes_expect_net_and_fails_expect_mnnvl(judge: Judge) -> None:
    judge_domain_transport([_record(NET_INIT)], judge, expect="net")
    judge_domain_transport([_record(NET_INIT)], judge, expect="mnnvl")
    assert [v for v, _, _ in _verdicts(judge)] == ["pass", "fail"]


def test_an_mnnvl_log_fails_expect_net(judge: Judge) -> None:
    judge_domain_transport([_record(MNNVL_INIT)], judge, expect="net")
    ((verdict, _, reason),) = _verdicts(judge)
    assert verdict == "fail" and "MNNVL" in reason


def test_a_published_gb200_tray_with_mnnvl_on_passes_and_with_it_off_fails(judge: Judge) -> None:
    """NVIDIA/nccl#2303, runs A and B on one GB200 tray: ``comm ... MNNVL 1`` with channels via P2P/MNNVL, then the
    same tray with NCCL_MNNVL_ENABLE=0: ``MNNVL 0``, channels via P2P/CUMEM (neither MNNVL nor the network)."""
    judge_domain_transport([_record((FIXTURES / "gb200-nccl2303-mnnvl-on.log").read_text())], judge, expect="mnnvl")
    off = _record((FIXTURES / "gb200-nccl2303-mnnvl-off.log").read_text())
    judge_domain_transport([off], judge, expect="mnnvl")
    judge_domain_transport([off], judge, expect="net")
    assert [v for v, _, _ in _verdicts(judge)] == ["pass", "fail", "fail"]


def test_published_gb200_fabric_lines_without_the_communicator_line_are_not_proof(judge: Judge) -> None:
    """NVIDIA/nccl#1769's GB200 init: the MNNVL fabric (busId, clique) lines, no communicator line yet."""
    judge_domain_transport([_record((FIXTURES / "gb200-nccl1769-init.log").read_text())], judge, expect="mnnvl")
    assert [v for v, _, _ in _verdicts(judge)] == ["fail"]


def test_published_single_node_nvls_log_is_neither_mnnvl_nor_net(judge: Judge) -> None:
    """nccl-tests#213's 8-GPU node: ``MNNVL 0`` and an NVLS communicator, no NET channel."""
    text = (FIXTURES / "h100-nccltests213-init.log").read_text()
    facts = parse_nccl_log(text)
    assert facts["mnnvl"] is False and facts["nvls_comm"] is True
    judge_domain_transport([_record(text)], judge, expect="net")
    judge_domain_transport([_record(text)], judge, expect="mnnvl")
    assert [v for v, _, _ in _verdicts(judge)] == ["fail", "fail"]


def test_a_rank_without_nccl_facts_is_unreadable_not_a_pass(judge: Judge) -> None:
    record = _record(MNNVL_INIT)
    record.data["nccl"] = None
    judge_domain_transport([record], judge, expect="mnnvl")
    assert [v for v, _, _ in _verdicts(judge)] == ["unmeasured"]  # ERROR: could not measure
