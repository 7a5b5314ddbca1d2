"""NCCL_DEBUG=INFO and nccl-tests output parsing, the operator's table, and the busbw plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuaccept.contracts.nccl_payloads import NcclFacts, NcclTestsRan, NcclTestsRow
from gpuaccept.contracts.nccl_sweep import GroupTable, Row
from gpuaccept.dispatch.result import parse_records
from gpuaccept.nccl.ncclinfo import collect_facts, parse_nccl_log, summarize_algorithms
from gpuaccept.nccl.nccltests import parse_nccl_tests
from gpuaccept.probes import nccl_tests
from gpuaccept.probes.specs import NCCL_TESTS
from gpuaccept.report.charts.nccl import plot_busbw
from gpuaccept.verdicts.nccl_lines import sweep_lines, wrong_lines

pytestmark = pytest.mark.selftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"


def test_recorded_h200_log():
    """Recorded on 2x H200 (NCCL 2.28.9, no IB): Socket network, P2P over NVLink, Ring/Simple for big sizes."""
    facts = parse_nccl_log((FIXTURES / "nccl_debug_2xh200_rank0.log").read_text())
    assert facts["version"] == "2.28.9+cuda13.0"
    assert facts["network"] == "Socket" and facts["nics"] == ["eth0:192.0.2.2<0>"]
    assert "IB" not in facts["nics_by_plugin"], "NET/IB logged 'Using [RO]': no device, not a NIC in use"
    assert set(facts["transports"]) == {"P2P/CUMEM"}
    assert facts["env"] == {"NCCL_NVLS_ENABLE": "0"}
    assert (facts["ranks"], facts["nodes"], facts["local_ranks"]) == (2, 1, 2)
    algos = summarize_algorithms(facts["tuning"], 2)
    assert algos["all_reduce"][4 << 30] == "RING/SIMPLE"
    assert algos["all_gather"][1 << 20] == "RING/LL"  # logged as 512 KiB per rank, mapped back to the size


def test_synthetic_ib_lines():
    text = "\n".join(
        [
            "h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ib0:10.0.0.5<0>",
            "h:1:1 [0] NCCL INFO Using network IB",
            "h:1:1 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
            "h:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring.",
            "h:1:1 [0] NCCL INFO NVLS multicast support is not available on dev 0",
        ]
    )
    facts = parse_nccl_log(text)
    assert facts["nics"] == ["mlx5_0:1/IB", "mlx5_3:1/IB"]
    assert facts["transports"] == {"NET/IB/0/GDRDMA": 1, "P2P/CUMEM/read": 1}
    assert facts["env"] == {"NCCL_ALGO": "Ring"} and facts["nvls_available"] is False


def test_collect_facts_reads_this_ranks_files(tmp_path):
    (tmp_path / "nccl.rank1.host.42.log").write_text("x NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    (tmp_path / "nccl.rank0.host.41.log").write_text("x NCCL INFO NCCL version 9.9.9\n")
    facts = collect_facts(str(tmp_path), 1, 2, keep=True)
    assert facts is not None and facts["version"] == "2.21.5+cuda12.4"
    assert set(facts) == NcclFacts.__required_keys__  # every key written, None where the log did not say
    assert facts["mnnvl"] is None and facts["net"] is None and facts["nics"] == []
    again = collect_facts(str(tmp_path), 1, 2, keep=False)
    assert again is not None and again["version"] == "2.21.5+cuda12.4"
    assert collect_facts(None, 1, 2, keep=False) is None
    assert not tmp_path.exists()


def test_nccl_tests_table():
    parsed = parse_nccl_tests((FIXTURES / "all_reduce_perf_format.txt").read_text())
    assert parsed["version"] == "2.17.6" and parsed["nccl"] == "22809"
    assert parsed["avg_busbw"] == pytest.approx(335.68) and parsed["out_of_bounds"] == 0
    assert [d["name"] for d in parsed["devices"]] == ["NVIDIA H200", "NVIDIA H200"]
    big = parsed["rows"][-1]
    assert big["size"] == 4 << 30 and big["oop_busbw"] == pytest.approx(345.01) and big["ip_wrong"] == 0
    # the probe's payload types say what it carries: a run's table, each row with exactly these keys
    assert set(parsed) <= NcclTestsRan.__required_keys__ and set(big) == NcclTestsRow.__required_keys__


def test_nccl_tests_in_place_alltoall_is_not_applicable():
    (row,) = parse_nccl_tests((FIXTURES / "alltoall_perf_format.txt").read_text())["rows"]
    assert row["oop_wrong"] == 0 and row["ip_wrong"] is None and row["ip_busbw"] == pytest.approx(11.68)


def _table() -> GroupTable:
    rows = [
        Row("all_reduce", 1 << 20, 2, 45.9, 22.8, 22.8, {0: 45.0, 1: 46.8}, {0: 0, 1: 0}, {}),
        Row(
            "all_reduce",
            4 << 30,
            2,
            12481.3,
            344.1,
            344.1,
            {0: 1.0, 1: 1.0},
            {0: 0, 1: 5},
            {1: {"row": 1, "index": 9, "got": 4.0, "want": 3.0}},
        ),
        Row("broadcast", 4 << 30, 2, 11580.1, 370.9, 370.9, {0: 1.0, 1: 1.0}, {0: 0, 1: 0}, {}),
    ]
    return GroupTable(0, ("n1",), (0, 1), rows=rows)


def test_operator_lines():
    table = _table()
    lines = sweep_lines(table, {"all_reduce": {str(4 << 30): "RING/SIMPLE"}})
    assert "4 GiB" in lines[2] and "344.10" in lines[2] and lines[2].endswith("RING/SIMPLE")
    (wrong,) = wrong_lines(table, {1: "rank 1 (n1 GPU 1 (0000:07:00.0))"})
    assert wrong.startswith("WRONG RESULT all_reduce 4 GiB on rank 1 (n1 GPU 1")
    assert "5 wrong elements" in wrong and "4 instead of 3" in wrong


def test_plot_writes_png(tmp_path):
    table = _table()
    series = {c: {"n1": [(r.size, r.busbw) for r in table.by_collective(c)]} for c in ("all_reduce", "broadcast")}
    path = plot_busbw(series, tmp_path / "a" / "p.png", title="t", thresholds={"all_reduce": 310.0})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError):
        plot_busbw({"all_reduce": {}}, tmp_path / "q.png", title="t")


def test_nccl_tests_probe_writes_a_ran_and_a_timed_out_run(tmp_path, capsys):
    """Each collective's binary is one outcome of the contract: ``ran`` (its table, None where nccl-tests printed
    no summary) or ``timed_out`` (its error); both validate as ``NcclTestsRecord``."""
    table = (FIXTURES / "all_reduce_perf_format.txt").read_text()
    (tmp_path / "all_reduce_perf").write_text(f"#!/bin/sh\ncat <<'END'\n{table}END\n")
    (tmp_path / "all_gather_perf").write_text("#!/bin/sh\nsleep 5\n")
    for binary in tmp_path.iterdir():
        binary.chmod(0o755)
    nccl_tests.main(["--dir", str(tmp_path), "--ngpus", "2", "--timeout", "0.5"])
    (record,) = parse_records("nccl_tests", capsys.readouterr().out, 1, ("node1",))
    runs = NCCL_TESTS.read(NCCL_TESTS.validate(record))["runs"]
    ran, timed_out = runs["all_reduce"], runs["all_gather"]
    assert ran["outcome"] == "ran" and ran["returncode"] == 0 and ran["rows"] and ran["avg_busbw"] is not None
    assert timed_out["outcome"] == "timed_out" and timed_out["error"] == "timeout after 0.5 s"
