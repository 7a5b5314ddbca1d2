"""IMEX per job: the probe runs a recorded ``nvidia-imex-ctl`` put first on PATH (``fixtures/imex/bin``: prints a
published output, or an edit of one named in ``fixtures/imex/README.md``), so the parser and the probe run as on
a node; the judges then hold the domain and the channel to what the block should have.

The channel is a real device file: ``/dev/null`` (a character device that opens), a character device of a
major no driver holds (made with mknod: open() gives ENXIO, as on the dev cluster), or nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuaccept.contracts.imex import ImexRecord
from gpuaccept.fabric.imex import parse_imex_ctl
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import imex as probe
from gpuaccept.probes import specs
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.imex import imex_absent, judge_imex_channel, judge_imex_domain

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imex"


@pytest.fixture(autouse=True)
def _recorded_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{FIXTURES / 'bin'}:{os.environ['PATH']}")


def read(
    monkeypatch: pytest.MonkeyPatch, recording: str, node: str, channels: Path | str = "/nonexistent"
) -> ImexRecord:
    """One node's IMEX probe over ``recording``, validated as the spec validates a rank's payload."""
    monkeypatch.setenv("GPUACCEPT_IMEX_RECORDING", str(FIXTURES / recording))
    monkeypatch.setenv("SLURMD_NODENAME", node)
    record = probe.collect(0.0, channels=str(channels))
    return ImexRecord.model_validate(record.model_dump(mode="json"))


def judge() -> tuple[Judge, list[MetricResult]]:
    results: list[MetricResult] = []
    return Judge(load_thresholds(), lambda node: "cpu", results.append, "test_imex"), results


def verdicts(results: list[MetricResult]) -> dict[tuple[str, str], str]:
    return {(r.metric, r.node): r.verdict for r in results}


def test_published_two_node_output_parses() -> None:
    answer = parse_imex_ctl((FIXTURES / "gh200-2node.ready.txt").read_text(), ["nvidia-imex-ctl", "-N"])
    assert [(m.index, m.ip, m.state, m.host_name) for m in answer.members] == [
        (0, "10.136.206.47", "READY", None),
        (1, "10.136.206.48", "READY", None),
    ]
    assert answer.connectivity == [["C", "C"], ["C", "C"]] and answer.domain_state == "UP"


def test_version_and_host_name_fields_are_told_apart() -> None:
    text = (
        "Nodes:\nNode #0   - 10.0.0.1   - gb-r01-01   - READY   - Version: 570.124.06\n\n Nodes From\\To  0\n  0  C\n"
    )
    (member,) = parse_imex_ctl(text, []).members
    assert (member.ip, member.host_name, member.state, member.version) == (
        "10.0.0.1",
        "gb-r01-01",
        "READY",
        "570.124.06",
    )


def test_text_without_a_node_table_is_not_an_answer() -> None:
    with pytest.raises(ValueError, match="no 'Nodes:' table"):
        parse_imex_ctl("Connection refused: is nvidia-imex running?\n", [])


def block(monkeypatch: pytest.MonkeyPatch, recording: str) -> dict[str, ImexRecord]:
    return {node: read(monkeypatch, recording, node) for node in ("node1", "node2")}


def test_healthy_domain_passes_on_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    j, results = judge()
    judge_imex_domain(block(monkeypatch, "loopback-b1.ready.txt"), ["node1", "node2"], "job", j, block="b1")
    assert {r.verdict for r in results} == {"pass"} and len(results) == 2 * 6
    assert {r.extra["settle_s"] for r in results} == {0.0}


#: the AWS ParallelCluster guide's UltraServer (u-p6e-gb200x72): queue q1, compute resource cr1, 18 static nodes
#: named as ParallelCluster names them (``<queue>-st-<resource>-<n>``), each with the IP of one member of the
#: guide's output in turn; members carry no host name there, so they are matched by IP
P6E_NODES = [f"q1-st-cr1-{n}" for n in range(1, 19)]


def p6e_block(monkeypatch: pytest.MonkeyPatch, recording: Path) -> dict[str, ImexRecord]:
    """The 18 nodes' IMEX probes over ``recording``, each node's addresses its member's IP (the guide's order)."""
    ips = [m.ip for m in parse_imex_ctl(recording.read_text(), []).members]
    assert len(ips) == len(P6E_NODES)
    return {
        node: read(monkeypatch, str(recording), node).model_copy(update={"addresses": [ip]})
        for node, ip in zip(P6E_NODES, ips, strict=True)
    }


def test_published_18_node_ultraserver_passes_and_one_unavailable_member_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """AWS ParallelCluster's p6e-gb200 output (18 members READY, all C, UP) passes with its 18 members matched to
    the 18 nodes; edited on one member line only (Node #7 ``READY`` -> ``UNAVAILABLE``, table and state left as
    published) it fails ``imex_members_ready`` on every node, blamed on that member's node."""
    published = FIXTURES / "gb200-18node.ready.txt"
    j, results = judge()
    judge_imex_domain(p6e_block(monkeypatch, published), P6E_NODES, "job", j, block="u-p6e-gb200x72")
    assert len(results) == 18 * 6 and {r.verdict for r in results} == {"pass"}
    members = [r for r in results if r.metric == "imex_members"]
    assert {r.value for r in members} == {f"job: {', '.join(sorted(P6E_NODES))}"}
    assert {len(r.extra["members"]) for r in members} == {18}
    text = published.read_text()
    line = "Node #7   - 172.31.51.157   - READY "
    assert text.count(line) == 1
    edited = tmp_path / "gb200-18node.node7-unavailable.txt"
    edited.write_text(text.replace(line, "Node #7   - 172.31.51.157   - UNAVAILABLE "))
    j, results = judge()
    judge_imex_domain(p6e_block(monkeypatch, edited), P6E_NODES, "job", j, block="u-p6e-gb200x72")
    ready = [r for r in results if r.metric == "imex_members_ready"]
    assert len(ready) == 18 and {(r.verdict, r.node, r.value) for r in ready} == {
        ("fail", "q1-st-cr1-8", "172.31.51.157 UNAVAILABLE")
    }
    assert {r.verdict for r in results if r.metric != "imex_members_ready"} == {"pass"}


def test_members_matched_by_ip_where_no_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    records = block(monkeypatch, "gh200-2node.ready.txt")
    records = {
        "node1": records["node1"].model_copy(update={"addresses": ["10.136.206.47"]}),
        "node2": records["node2"].model_copy(update={"addresses": ["10.136.206.48"]}),
    }
    j, results = judge()
    judge_imex_domain(records, ["node1", "node2"], "job", j, block="b1")
    assert {r.verdict for r in results} == {"pass"}


def test_unavailable_member_fails_naming_its_node(monkeypatch: pytest.MonkeyPatch) -> None:
    j, results = judge()
    judge_imex_domain(block(monkeypatch, "loopback-b1.unavailable.txt"), ["node1", "node2"], "job", j, block="b1")
    got = verdicts(results)
    assert got[("imex_members_ready", "node2")] == "fail"
    assert got[("imex_connectivity", "node1")] == "fail" and got[("imex_domain_state", "node1")] == "fail"
    ready = next(r for r in results if r.metric == "imex_members_ready")
    assert ready.value == "127.0.0.1 (node2) UNAVAILABLE"


def test_version_mismatch_fails_connectivity_though_the_domain_reads_up(monkeypatch: pytest.MonkeyPatch) -> None:
    j, results = judge()
    judge_imex_domain(block(monkeypatch, "loopback-b1.version-mismatch.txt"), ["node1", "node2"], "job", j, block="b1")
    got = verdicts(results)
    assert got[("imex_connectivity", "node1")] == "fail" and got[("imex_domain_state", "node1")] == "pass"
    cell = next(r for r in results if r.metric == "imex_connectivity")
    assert "!V!" in str(cell.value) and "node2" in str(cell.value)


def test_extra_member_is_a_tenancy_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    j, results = judge()
    judge_imex_domain(block(monkeypatch, "loopback-b1.extra-member.txt"), ["node1", "node2"], "job", j, block="b1")
    extra = [r for r in results if r.metric == "imex_extra_member"]
    assert {(r.verdict, r.value) for r in extra} == {("fail", "127.0.0.1 (node3)")}
    assert all(r.verdict == "pass" for r in results if r.metric == "imex_members")


def test_block_scope_wants_the_whole_block_and_one_member_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    j, results = judge()
    judge_imex_domain(block(monkeypatch, "loopback-b1.ready.txt"), ["node1", "node2", "node3"], "block", j, block="b1")
    members = next(r for r in results if r.metric == "imex_members")
    assert (members.verdict, members.value) == ("fail", "missing node3")
    j, results = judge()
    judge_imex_domain(
        {"node1": read(monkeypatch, "gh200-1node.ready.txt", "node1")}, ["node1", "node2"], "job", j, block="b1"
    )
    members = next(r for r in results if r.metric == "imex_members")
    assert members.verdict == "fail" and "fewer than 2 members (1)" in str(members.value)


def test_one_allocated_node_is_not_applicable() -> None:
    assert imex_absent("b1", ["node1", "node2"]) is None
    why = imex_absent("b1", ["node1"])
    assert why is not None and why.startswith("not applicable") and "node1" in why


def test_daemon_not_answering_and_tool_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    silent = tmp_path / "refused.txt"
    silent.write_text("recorded refusal\n")
    (tmp_path / "refused.txt.rc").write_text("1\n")
    monkeypatch.setenv("GPUACCEPT_IMEX_RECORDING", str(silent))
    monkeypatch.setenv("SLURMD_NODENAME", "node1")
    record = probe.collect(0.0)
    assert record.status.outcome == "no_answer" and "exited non-zero" in record.status.why
    j, results = judge()
    judge_imex_domain({"node1": record, "node2": record}, ["node1", "node2"], "job", j, block="b1")
    assert verdicts(results)[("imex_daemon", "node1")] == "fail"
    missing = probe.collect(0.0, tool="nvidia-imex-ctl-not-installed")
    assert missing.status.outcome == "tool_missing"


def channel_record(monkeypatch: pytest.MonkeyPatch, folder: Path) -> ImexRecord:
    return read(monkeypatch, "loopback-b1.ready.txt", "node1", channels=folder)


def test_channel_that_opens_passes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "channel0").symlink_to("/dev/null")  # a character device that opens
    record = channel_record(monkeypatch, tmp_path)
    record = record.model_copy(update={"driver_major": record.channel.major})
    j, results = judge()
    judge_imex_channel({"node1": record}, j)
    assert [(r.metric, r.verdict) for r in results] == [("imex_channel", "pass"), ("imex_channel_open", "pass")]


def test_missing_channel_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    j, results = judge()
    judge_imex_channel({"node1": channel_record(monkeypatch, tmp_path / "absent")}, j)
    assert [(r.metric, r.verdict, r.value) for r in results] == [("imex_channel", "fail", "missing")]


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_channel_without_a_driver_is_unmeasured_never_passed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The dev cluster's case: Slurm made the file with a major no driver holds; open() gives ENXIO."""
    used = {
        int(line.split()[0]) for line in Path("/proc/devices").read_text().splitlines() if line[:4].strip().isdigit()
    }
    major = next(m for m in range(234, 255) if m not in used)
    os.mknod(tmp_path / "channel3", stat.S_IFCHR | 0o666, os.makedev(major, 3))
    record = channel_record(monkeypatch, tmp_path)
    assert (record.channel.open_error, record.channel.minor, record.driver_major) == ("ENXIO", 3, None)
    j, results = judge()
    judge_imex_channel({"node1": record}, j)
    assert [(r.metric, r.verdict) for r in results] == [("imex_channel", "pass"), ("imex_channel_open", "unmeasured")]
    # the same refusal where an IMEX driver does hold the major is a failure
    j, results = judge()
    judge_imex_channel({"node1": record.model_copy(update={"driver_major": major})}, j)
    assert results[1].verdict == "fail" and results[1].value == "open failed: ENXIO"


def test_spec_limit_follows_the_settle_window() -> None:
    assert specs.IMEX.limit(["--settle-s", "30"], 0).seconds == 120
