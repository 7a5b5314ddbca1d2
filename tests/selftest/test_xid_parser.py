"""Xid parsing and judging against kernel-log excerpts in fixtures/kernel-log/ (every format the probe reads)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.dispatch.result import parse_records
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import xid as xid_probe
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.loader import load_thresholds as _load
from gpuaccept.verdicts.gpu_health import hardware_codes, judge_xid, parse_line, parse_log

from .ending import ends

pytestmark = pytest.mark.selftest


@functools.cache
def load_thresholds(site: Path | None = None) -> Thresholds:
    """The packaged thresholds (plus a site file), validated once per module: pydantic takes ~0.5 s."""
    return _load(site)


LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "kernel-log"
H100_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
GPUS = [
    {"index": i, "pci_bus_id": f"00000000:{b.upper()}:00.0", "name": "NVIDIA H100 80GB HBM3"}
    for i, b in enumerate(H100_BUSES)
]


@pytest.fixture()
def judge() -> Judge:
    return Judge(load_thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")


def probe_data(name: str, gpus: list[dict[str, Any]] = GPUS) -> dict[str, Any]:
    """What the probe sends for a saved log (``--log-file``), with the node's GPUs."""
    data = xid_probe.collect([], LOGS / name)
    return {**data, "gpus": gpus}


def test_every_format_parses() -> None:
    dmesg = parse_line(
        "[ 8123.456789] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    assert (dmesg.code, dmesg.bus, dmesg.uptime_s, dmesg.pid) == (79, "0000:9a:00", 8123.456789, "unknown")
    journal = parse_line(
        "Nov 21 03:40:02 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid=25314, name=python3, "
        "An uncorrectable double bit error"
    )
    assert (journal.code, journal.when, journal.pid, journal.uptime_s) == (48, "Nov 21 03:40:02", "25314", None)
    assert journal.message.startswith("name=python3, An uncorrectable")
    kmsg = parse_line(
        "4,20552,914512399001,-;NVRM: Xid (PCI:0000:2a:00): 45, pid=4242, name=pt_main_thread, Ch 00000008"
    )
    assert (kmsg.code, kmsg.uptime_s) == (45, 914512.399001)
    old = parse_line("[  966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000")
    assert (old.code, old.bus, old.pid) == (31, "0000:01:00", None)
    assert parse_line("[ 6.148233] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07") is None
    assert parse_line("nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 32") is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dmesg-h100-clean.txt", []),
        ("dmesg-h100-xid79.txt", [13, 13, 79]),
        ("journalctl-h100-ecc.txt", [94, 63, 48, 43]),
        ("kmsg-h100-app-xids.txt", [31, 45, 13]),
        ("journalctl-monotonic-h100-nvlink.txt", [74, 74]),
        ("dmesg-old-driver.txt", [31, 62]),
    ],
)
def test_fixture_codes(name: str, expected: list[int]) -> None:
    assert [e.code for e in parse_log((LOGS / name).read_text().splitlines())] == expected


def test_clean_log_passes(judge: Judge) -> None:
    judge_xid(probe_data("dmesg-h100-clean.txt"), judge, "n1")
    assert {r.value for r in judge.results if r.metric == "xid_hardware_events"} == {0}
    assert len([r for r in judge.results if r.metric == "xid_hardware_events"]) == 8


def test_application_xids_are_reported_not_failed(judge: Judge) -> None:
    judge_xid(probe_data("kmsg-h100-app-xids.txt"), judge, "n1")
    events = {r.subject: r.value for r in judge.results if r.metric == "xid_events" and r.value}
    assert events == {"1 (00000000:2A:00.0)": 2, "6 (00000000:BA:00.0)": 1}


def test_fallen_off_the_bus_names_the_gpu(judge: Judge) -> None:
    with ends(judge, "failed") as caught:
        judge_xid(probe_data("dmesg-h100-xid79.txt"), judge, "n1")
    text = str(caught.value)
    assert "n1 GPU 4 (00000000:9A:00.0): xid_hardware_events = 1" in text
    assert "Xid 79" in text and "GPU 1 " not in text.split("details")[0]


def test_ecc_xids_counted_on_their_gpu(judge: Judge) -> None:
    with ends(judge, "failed", match=r"GPU 0 \(00000000:18:00.0\): xid_hardware_events = 3"):
        judge_xid(probe_data("journalctl-h100-ecc.txt"), judge, "n1")


def test_nvlink_xid_and_unknown_device(judge: Judge) -> None:
    with ends(judge, "failed", match=r"GPU 3 \(00000000:5D:00.0\): xid_hardware_events = 2"):
        judge_xid(probe_data("journalctl-monotonic-h100-nvlink.txt"), judge, "n1")
    other = Judge(load_thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "t")
    with ends(other, "failed", match=r"GPU unknown device 0000:01:00: xid_hardware_events = 1"):
        judge_xid(probe_data("dmesg-old-driver.txt"), other, "n1")


def test_unreadable_log_is_an_error_not_a_pass(judge: Judge) -> None:
    data = {
        "readable": False,
        "source": None,
        "errors": {
            "dmesg": "dmesg: read kernel buffer failed: Operation not permitted",
            "journalctl": "answered with no kernel lines (log hidden from this user?)",
            "kmsg": "PermissionError: [Errno 1] Operation not permitted: '/dev/kmsg'",
        },
        "xid_lines": [],
        "gpus": GPUS,
    }
    with ends(judge, "error", match=r"kernel log is unreadable.*dmesg: read kernel buffer failed"):
        judge_xid(data, judge, "n1")


def test_probe_falls_through_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        xid_probe.SOURCES, "dmesg", lambda: (None, "dmesg: read kernel buffer failed: Operation not permitted")
    )
    monkeypatch.setitem(xid_probe.SOURCES, "journalctl", lambda: ("-- No entries --\n", None))
    monkeypatch.setitem(xid_probe.SOURCES, "kmsg", lambda: ((LOGS / "kmsg-h100-app-xids.txt").read_text(), None))
    source, text, errors = xid_probe.read_log(["dmesg", "journalctl", "kmsg"])
    assert source == "kmsg" and "Xid" in (text or "")
    assert set(errors) == {"dmesg", "journalctl"}
    monkeypatch.setitem(xid_probe.SOURCES, "kmsg", lambda: (None, "PermissionError"))
    assert xid_probe.read_log(["dmesg", "journalctl", "kmsg"])[0] is None


def test_probe_log_file_emits_one_record(capsys: pytest.CaptureFixture[str]) -> None:
    xid_probe.main(["--log-file", str(LOGS / "dmesg-h100-xid79.txt")])
    (record,) = parse_records("xid", capsys.readouterr().out, 1, ("node1",))  # a long line comes in parts
    data = record.data
    assert data["readable"] and data["xid_lines_total"] == 3 and data["log_start_s"] == 0.0


def test_hardware_list_comes_from_thresholds() -> None:
    thresholds = load_thresholds()
    codes = hardware_codes(thresholds.limits_for("H200")["xid_hardware_codes"])
    assert {48, 63, 64, 74, 79, 94, 95} <= codes
    assert not {13, 31, 43, 45} & codes
    assert hardware_codes(None) is None  # judge_xid records xid_hardware_events unreadable
