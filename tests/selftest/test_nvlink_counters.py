"""TELEM07, NVLink metrics from the GPU's side: the nvlink probe's per-link read (each active link's data
counters, ``probes/nvlink.link_telemetry``) and its judge ``nvlink_link_counters`` (each of the SKU's links
up and giving its counters).

A real GB200's per-link output (``nvidia-smi nvlink -s``, NVIDIA/k8s-test-infra issue #371, in
fixtures/nvml/) is served as ``nvidia-smi`` on ``PATH`` to the probe, beside a fake NVML whose per-link speed
field answers "not supported" (so the probe takes its own ``nvidia-smi`` fallback): the GB200 passes with the
catalogue's limits; the same output with link 5 down fails, naming it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import nvlink
from gpuaccept.probes.specs import NVLINK, PayloadError
from gpuaccept.thresholds.loader import Thresholds, load_thresholds
from gpuaccept.verdicts.nvlink import judge_link_counters, judge_nvlink

from .nvml_recordings import H200_2GPU_LINKS, not_recorded, older_nvlink
from .test_gpu_probes import FakeNVML

pytestmark = pytest.mark.selftest

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "nvml" / "gb200-k8s-test-infra-371.nvlink-s.txt"


@functools.cache
def thresholds() -> Thresholds:
    return load_thresholds(None)


class GB200(FakeNVML):
    """One GPU named as the #371 GB200 prints it, NVLink 5, its per-link speed field not supported, ``down``
    links reading state 0."""

    def __init__(self) -> None:
        super().__init__(count=1)
        self.down: set[int] = set()

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA GB200"

    def nvmlDeviceGetNvLinkVersion(self, h: int, link: int) -> int:
        return 5

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return 0 if link in self.down else super().nvmlDeviceGetNvLinkState(h, link)

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int | tuple[int, int]]) -> list[Any]:
        out = super().nvmlDeviceGetFieldValues(h, ids)
        for field, value in zip(ids, out, strict=True):
            if field == pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON:
                value.nvmlReturn = 3  # as on the H200's 580 driver: the probe falls back per link
        return out


@pytest.fixture()
def gb200(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> GB200:
    """The fake NVML, and ``nvidia-smi`` on PATH printing ``tmp_path/nvlink-s.txt`` (the published output)."""
    lib = GB200()
    monkeypatch.setattr(nvlink, "nvml", lambda: lib)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "nvlink-s.txt").write_text(PUBLISHED.read_text())
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat {tmp_path / 'nvlink-s.txt'}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    return lib


def _judged(data: dict[str, Any]) -> dict[str, Any]:
    judge = Judge(thresholds(), lambda node: "GB200", lambda result: None, "selftest")
    judge_nvlink(NVLINK.read(RankRecord("tray1", 0, 1, 0, None, json.loads(json.dumps(data)))), judge, "tray1")
    return {r.metric: r for r in judge.results}


def test_published_gb200_links_pass_with_every_counter(gb200: GB200, tmp_path: Path) -> None:
    data = nvlink.collect(tmp_path)
    state = data["gpus"][0]["nvlink"]
    assert state["speed_source"] == "nvidia-smi nvlink -s" and state["speed_mbps_per_link"] == dict.fromkeys(
        range(18), 53125
    )
    assert state["telemetry"]["link_count"] == 18 and len(state["telemetry"]["per_link"]) == 18
    judged = _judged(data)
    assert judged["nvlink_link_counters"].verdict == "pass", judged["nvlink_link_counters"].reason
    assert judged["nvlink_link_counters"].value == "all 18 links"
    assert judged["nvlink_link_counters"].extra["tx_kib"] == sum(k * 1000 for k in range(18))
    assert judged["nvlink_links_active"].verdict == "pass" and judged["nvlink_speed_mbps"].value == 53125


def test_a_link_down_fails_naming_it(gb200: GB200, tmp_path: Path) -> None:
    """The published output with link 5 edited to ``<inactive>`` and NVML's state of link 5 down."""
    served = tmp_path / "nvlink-s.txt"
    served.write_text(served.read_text().replace("Link 5: 53.125 GB/s", "Link 5: <inactive>"))
    gb200.down = {5}
    judged = _judged(nvlink.collect(tmp_path))
    counters = judged["nvlink_link_counters"]
    assert counters.verdict == "fail" and counters.value == "17 of 18 links; down: links [5]"
    assert judged["nvlink_links_active"].verdict == "fail"


def test_counters_nvml_does_not_give_fail_naming_the_links_and_the_code(gb200: GB200, tmp_path: Path) -> None:
    gb200.unread_counters = {3, 11}
    data = nvlink.collect(tmp_path)
    telemetry = data["gpus"][0]["nvlink"]["telemetry"]
    assert telemetry["per_link"]["3"] == {"tx_kib": None, "rx_kib": None}
    assert telemetry["errors"]["3.tx_kib"] == "nvmlReturn 3"
    counters = _judged(data)["nvlink_link_counters"]
    assert counters.verdict == "fail"
    assert counters.value == "16 of 18 links; counters not given on links [3, 11] (nvmlReturn 3)"


def test_no_link_giving_counters_could_not_measure_naming_the_code(gb200: GB200, tmp_path: Path) -> None:
    """A driver that offers none of the fields (NVML's code 3, not supported, on every link) is a reading the
    judge cannot have, not a link fault: could not measure, naming NVML's code, never a pass."""
    gb200.unread_counters = set(range(18))
    counters = _judged(nvlink.collect(tmp_path))["nvlink_link_counters"]
    assert counters.verdict == "unmeasured" and counters.value == "unreadable"
    assert "no per-link data counters on links [0, 1," in (counters.reason or "") and "nvmlReturn 3" in (
        counters.reason or ""
    )


def test_a_null_counter_without_its_reason_is_refused(gb200: GB200, tmp_path: Path) -> None:
    gb200.unread_counters = {3}
    data = json.loads(json.dumps(nvlink.collect(tmp_path)))
    del data["gpus"][0]["nvlink"]["telemetry"]["errors"]["3.rx_kib"]
    with pytest.raises(PayloadError, match=r"no errors entry saying why: 3\.rx_kib"):
        NVLINK.validate(RankRecord("tray1", 0, 1, 0, None, data))


def test_a_recording_older_than_the_per_link_read_could_not_measure() -> None:
    """The 2 x H200 recording predates the read (its 18 links up, no counters kept): judged, it is unmeasured
    naming the recording, never a pass nor a link fault."""
    data = older_nvlink()
    judge = Judge(thresholds(), lambda node: "H200", lambda result: None, "selftest")
    judge_link_counters(NVLINK.read(RankRecord("vm", 0, 1, 0, None, data))["gpus"][0], judge, "vm")
    (result,) = judge.results
    assert result.verdict == "unmeasured" and not_recorded(H200_2GPU_LINKS) in result.reason
