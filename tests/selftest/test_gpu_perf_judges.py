"""Judging of the benchmark probes with the real thresholds: floors, stragglers, checksums, busy GPUs.

Records are shaped exactly as the probes emit them on 2 x H200 SXM 141GB (fixtures/nvml/ holds
the recorded originals); the faults are edits of those records.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.loader import load_thresholds as _load
from gpuaccept.verdicts.bench import agreement
from gpuaccept.verdicts.compute import judge_burn_in, judge_matmul, tflops_drop_pct
from gpuaccept.verdicts.memory import judge_hostbw, judge_membw, judge_p2p
from gpuaccept.verdicts.nvlink import judge_nvlink_under_load

from .ending import ends

pytestmark = pytest.mark.selftest


@functools.cache
def load_thresholds(site: Path | None = None) -> Thresholds:
    """The packaged thresholds (plus a site file), validated once per module: pydantic takes ~0.5 s."""
    return _load(site)


GPUS = [
    {"index": 0, "name": "NVIDIA H200", "pci_bus_id": "00000000:00:06.0", "uuid": "GPU-6d39"},
    {"index": 1, "name": "NVIDIA H200", "pci_bus_id": "00000000:00:07.0", "uuid": "GPU-be28"},
]
BUSY = [
    {"gpu": 1, "pci_bus_id": "00000000:00:07.0", "processes": [{"pid": 1516, "name": "python3", "used_mib": 874.0}]}
]


@pytest.fixture()
def judge() -> Judge:
    return Judge(load_thresholds(), lambda node: "H200", lambda result: None, "selftest")


def record(rank: int, data: dict[str, Any]) -> RankRecord:
    return RankRecord(node="vm", rank=rank, world_size=2, local_rank=rank, gpu=GPUS[rank], data=data)


def bench(part: str, records: list[RankRecord]) -> dict[str, Any]:
    """A node's gpubench result holding each record's figures as ``part`` (a busy GPU's busy entry)."""
    return {
        "gpus": [r.gpu for r in records],
        "per_gpu": [{} if "skipped" in r.data else {part: r.data} for r in records],
        "busy": [b for r in records for b in r.data.get("busy") or []],
    }


def matmul(tflops: float, checksum: int = 1234567, reasons: int | None = 4) -> dict[str, Any]:
    return {
        "busy": [],
        "tflops": tflops,
        "tflops_burst": 760.0,
        "best_size": 8192,
        "checksum": checksum,
        "by_size": {
            "4096": {"tflops": tflops - 20, "during": {"sm_clock_mhz": 1755, "clock_event_reasons": 4}},
            "8192": {"tflops": tflops, "during": {"sm_clock_mhz": 1410, "clock_event_reasons": reasons}},
        },
    }


def test_healthy_matmul_passes(judge: Judge) -> None:
    judge_matmul(bench("matmul", [record(0, matmul(664.5)), record(1, matmul(678.8))]), judge, "vm")
    assert {r.metric for r in judge.results} >= {"matmul_bf16_tflops", "matmul_checksum", "matmul_bf16_burst_tflops"}


def test_a_gpu_that_throttles_under_load_fails_however_fast(judge: Judge) -> None:
    """HW thermal slowdown (0x40) in one size's sample under load fails that GPU, above its TFLOP/s floor;
    the power cap a loaded board sits at (0x4) is reported beside it, and the other GPU passes."""
    records = [record(0, matmul(670.0)), record(1, matmul(660.0, reasons=0x44))]
    with ends(judge, "failed", match=r"GPU 1 \(00000000:00:07.0\): matmul_clock_events_failing = hw_thermal_slowdown"):
        judge_matmul(bench("matmul", records), judge, "vm")
    checks = {r.subject: r for r in judge.results if r.metric == "matmul_clock_events_failing"}
    assert checks["0 (00000000:00:06.0)"].verdict == "pass" and checks["0 (00000000:00:06.0)"].value == "none"
    assert checks["1 (00000000:00:07.0)"].extra["reported"] == "sw_power_cap"


def test_clock_events_not_read_under_load_are_an_error(judge: Judge) -> None:
    """No size's sample read the reasons: could not measure, never a pass."""
    records = [record(0, matmul(670.0)), record(1, matmul(660.0))]
    for size in records[1].data["by_size"].values():
        size["during"]["clock_event_reasons"] = None
    with ends(judge, "error", match="matmul_clock_events_failing .*NVML gave no clock-event reasons"):
        judge_matmul(bench("matmul", records), judge, "vm")


def test_slow_gpu_fails_with_its_name(judge: Judge) -> None:
    with ends(judge, "failed", match=r"vm GPU 1 \(00000000:00:07.0\): matmul_bf16_tflops = 550"):
        judge_matmul(bench("matmul", [record(0, matmul(670.0)), record(1, matmul(550.0))]), judge, "vm")


def test_straggler_above_floor_fails(judge: Judge) -> None:
    # three GPUs, all above the 600 floor, one more than 10% under the node median
    records = [record(0, matmul(680.0)), record(1, matmul(682.0))]
    third = RankRecord("vm", 2, 3, 2, {**GPUS[1], "index": 2, "pci_bus_id": "00000000:00:08.0"}, matmul(605.0))
    with ends(judge, "failed", match=r"GPU 2 .*more than 10% below vm's median"):
        judge_matmul(bench("matmul", [*records, third]), judge, "vm")


def test_checksum_disagreement_names_the_odd_gpu() -> None:
    assert agreement({"0": 5, "1": 5, "2": 7}) == {"0": "match", "1": "match", "2": "differs from the other 2 GPUs"}
    two = agreement({"0": 5, "1": 7})
    assert all(v.startswith("no majority") for v in two.values())


def test_checksum_mismatch_fails(judge: Judge) -> None:
    with ends(judge, "failed", match="matmul_checksum = no majority"):
        judge_matmul(bench("matmul", [record(0, matmul(670.0, 1)), record(1, matmul(670.0, 2))]), judge, "vm")


def test_busy_gpu_is_an_error_naming_only_it(judge: Judge) -> None:
    busy = {"busy": BUSY, "skipped": "GPU busy"}
    with ends(judge, "error", match="GPU busy on vm") as caught:
        judge_matmul(bench("matmul", [record(0, matmul(670.0)), record(1, busy)]), judge, "vm")
    assert "GPU 1 (00000000:00:07.0): pid 1516 python3" in str(caught.value)
    assert "GPU 0" not in str(caught.value)
    assert [(r.subject, r.verdict) for r in judge.results if r.metric == "matmul_bf16_tflops"] == [
        ("0 (00000000:00:06.0)", "pass")
    ]


def test_busy_gpu_and_slow_sibling_is_a_failure(judge: Judge) -> None:
    """A threshold miss on GPU 0 is not hidden behind GPU 1 being busy."""
    with ends(judge, "failed", match=r"matmul_bf16_tflops = 500(.|\n)*also GPU busy on vm"):
        judge_matmul(
            bench("matmul", [record(0, matmul(500.0)), record(1, {"busy": BUSY, "skipped": "GPU busy"})]), judge, "vm"
        )


def burn(tflops: list[float], reasons: int = 4, end: int = 99) -> dict[str, Any]:
    intervals = [
        {
            "t_s": i * 2.0,
            "tflops": t,
            "sm_clock_mhz": 1410,
            "temperature_c": 60,
            "power_w": 690.0,
            "clock_event_reasons": reasons,
        }
        for i, t in enumerate(tflops)
    ]
    return {"busy": [], "checksum": 99, "checksum_end": end, "burn_in": {"intervals": intervals}}


def test_burn_in_steady_passes(judge: Judge) -> None:
    judge_burn_in([record(0, burn([668, 667, 666, 667, 665, 666])), record(1, burn([675] * 6))], judge, "vm")
    judged = {r.metric for r in judge.results if r.verdict == "pass"}
    expected = {"burnin_tflops_drop_pct", "burnin_checksum", "burnin_checksum_stable", "burnin_clock_events_failing"}
    assert expected <= judged, judged


def test_burn_in_drop_throttle_and_bitflip_fail(judge: Judge) -> None:
    assert tflops_drop_pct([{"tflops": t} for t in (700, 700, 650, 600, 560, 560)]) == 20.0
    with ends(judge, "failed") as caught:
        judge_burn_in(
            [record(0, burn([700, 700, 650, 600, 560, 560], reasons=0x4 | 0x40, end=98)), record(1, burn([675] * 6))],
            judge,
            "vm",
        )
    text = str(caught.value)
    assert "GPU 0 (00000000:00:06.0): burnin_tflops_drop_pct = 20.0" in text
    assert "burnin_clock_events_failing = hw_thermal_slowdown" in text
    assert "burnin_checksum_stable = changed during the burn-in" in text


def test_burn_in_clock_events_never_read_are_an_error_not_none(judge: Judge) -> None:
    """A burn-in whose samples carry no clock-event mask has not shown that no reason was set."""
    unread = burn([675] * 6)
    for interval in unread["burn_in"]["intervals"]:
        interval["clock_event_reasons"] = None
    with ends(judge, "error", match="GPU 1 .*burnin_clock_events_failing .*NVML gave no clock-event reasons"):
        judge_burn_in([record(0, burn([668] * 6)), record(1, unread)], judge, "vm")


def test_membw_and_hostbw(judge: Judge) -> None:
    judge_membw(
        bench(
            "membw",
            [
                record(0, {"busy": [], "tbps": 4.258, "best_size": 2 << 30}),
                record(1, {"busy": [], "tbps": 4.25, "best_size": 2 << 30}),
            ],
        ),
        judge,
        "vm",
    )
    host = {
        "busy": [],
        "h2d_gbps": 55.5,
        "d2h_gbps": 55.37,
        "pcie_gen_loaded": 5,
        "pcie_width_loaded": 16,
        "numa": {"bound": True, "bound_cpus": 32, "gpu_numa_node": -1},
    }
    degraded = {**host, "h2d_gbps": 27.6, "d2h_gbps": 27.5, "pcie_gen_loaded": 4}
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed") as caught:
        judge_hostbw(
            bench("hostbw", [record(0, host), record(1, degraded)]),
            j,
            "vm",
        )
    assert "GPU 1 (00000000:00:07.0): pcie_gen_loaded = 4" in str(caught.value)
    assert "hostbw_h2d_gbps = 27.6" in str(caught.value)
    healthy = bench("hostbw", [record(0, host), record(1, copy.deepcopy(host))])
    with ends(judge, "passed"):
        judge_hostbw(window(healthy, (0, 0), (0, 0)), judge, "vm")


def window(data: dict[str, Any], before: tuple[Any, ...], after: tuple[Any, ...], seconds: float = 60.0) -> dict:
    """``data`` with each GPU's ``idle`` and ``end`` samples holding these replay counter readings."""
    for entry, first, last in zip(data["per_gpu"], before, after, strict=True):
        entry["idle"] = {"pcie_gen": 1, "pcie_replay_counter": first, "monotonic_s": 1000.0}
        entry["end"] = {"pcie_gen": 5, "pcie_replay_counter": last, "monotonic_s": 1000.0 + seconds}
    return data


HOST = {"busy": [], "h2d_gbps": 55.5, "d2h_gbps": 55.37, "pcie_gen_loaded": 5, "pcie_width_loaded": 16}


def hostbw_bench() -> dict[str, Any]:
    return bench("hostbw", [record(0, copy.deepcopy(HOST)), record(1, copy.deepcopy(HOST))])


def test_pcie_replay_counter_judged_by_its_growth(judge: Judge) -> None:
    """The counter is cumulative: a GPU that logged 5000 replays before the run and none in it passes;
    one whose counter grew faster than DCGM's 8 per minute over the step fails, named with its count."""
    with ends(judge, "passed"):
        judge_hostbw(window(hostbw_bench(), (5000, 3), (5000, 11), seconds=60.0), judge, "vm")
    (ok,) = [r for r in judge.results if r.metric == "pcie_replays_per_min" and r.subject.startswith("1 ")]
    assert ok.value == 8.0 and ok.extra["replays"] == 8
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed", match=r"GPU 1 \(00000000:00:07\.0\): pcie_replays_per_min = 9\.0"):
        judge_hostbw(window(hostbw_bench(), (0, 0), (0, 3), seconds=20.0), j, "vm")


@pytest.mark.parametrize(
    ("before", "after", "why"),
    [
        ((0, None), (0, 4), "replay counter unread"),
        ((0, 9), (0, 2), r"went down \(9 -> 2"),
    ],
)
def test_pcie_replay_window_unreadable_is_an_error(before: tuple, after: tuple, why: str) -> None:
    """An unread counter, or one that went down (the driver reloaded), is could-not-measure, never a pass."""
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "error", match=why):
        judge_hostbw(window(hostbw_bench(), before, after), j, "vm")


def p2p(gbps: tuple[float, float] = (395.0, 394.0), crc: int = 0, replay: int = 0) -> dict[str, Any]:
    pairs = [
        {"src": 0, "dst": 1, "gbps": gbps[0], "peer_access": True},
        {"src": 1, "dst": 0, "gbps": gbps[1], "peer_access": True},
    ]
    errors = [
        {"gpu": g, "seconds": 2.0, "crc_flit": crc, "crc_data": 0, "replay": replay, "recovery": 0} for g in (0, 1)
    ]
    data = {
        "busy": [],
        "gpus": GPUS,
        "pairs": pairs,
        "matrix": {"gpus": [0, 1], "gbps": [[None, gbps[0]], [gbps[1], None]]},
        "nvlink_errors": errors,
    }
    return {"p2p": data}


def test_p2p_healthy_and_slow_pair(judge: Judge) -> None:
    assert judge_p2p(p2p(), judge, "vm")["gbps"][0][1] == 395.0
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed", match=r"1 \(00000000:00:07.0\) -> 0 \(00000000:00:06.0\): p2p_gbps = 120.0"):
        judge_p2p(p2p((395.0, 120.0)), j, "vm")


def test_p2p_nvlink_errors_under_load(judge: Judge) -> None:
    judge_nvlink_under_load(p2p(crc=40), judge, "vm")  # 20/s: below DCGM's 100/s
    judge_p2p(p2p(crc=400, replay=1), judge, "vm")  # the bandwidth verdict is not the link errors' one
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed") as caught:
        judge_nvlink_under_load(p2p(crc=400, replay=1), j, "vm")
    assert "p2p_nvlink_crc_flit_per_s = 200" in str(caught.value)
    assert "p2p_nvlink_replay_errors = 1" in str(caught.value)


def test_nvlink_errors_unreadable_is_an_error(judge: Judge) -> None:
    """Counters NVML would not give are 'could not measure', never a clean link."""
    record = p2p()
    for entry in record["p2p"]["nvlink_errors"]:
        entry.update(crc_flit=None, crc_data=None, replay=None, recovery=None)
    with ends(judge, "error") as ended:
        judge_nvlink_under_load(record, judge, "vm")
    for metric in ("crc_flit_per_s", "crc_data_per_s", "replay_errors", "recovery_errors"):
        assert f"vm GPU 1 (00000000:00:07.0): p2p_nvlink_{metric} (" in ended.value, ended.value


def test_nvlink_error_unread_link_named(judge: Judge) -> None:
    """One link NVML would not read: could not measure, naming the GPU and the link (never a legacy 0)."""
    record = p2p()
    record["p2p"]["nvlink_errors"][1].update(replay=None, unread_links={"replay": [11]})
    with ends(
        judge,
        "error",
        match=r"GPU 1 \(00000000:00:07.0\): p2p_nvlink_replay_errors \(.*"
        r"could not read replay on link\(s\) 11",
    ):
        judge_nvlink_under_load(record, judge, "vm")


def test_nvlink_errors_name_the_links() -> None:
    """Errors on one link say so (a port or cable to look at); spread over all links say that."""
    record = p2p(crc=400)
    for entry in record["p2p"]["nvlink_errors"]:
        entry.update(links=18, per_link={"crc_flit": {"7": 390, "3": 10}, "crc_data": {}})
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed", match=r"400 CRC flit errors in 2.0 s on 2 of 18 links, most on link 7 \(390\)"):
        judge_nvlink_under_load(record, j, "vm")


def test_p2p_busy_names_the_gpu(judge: Judge) -> None:
    rec = {"p2p": {"busy": BUSY, "gpus": GPUS, "skipped": "GPU busy"}}
    with ends(judge, "error", match=r"GPU 1 \(00000000:00:07.0\): pid 1516"):
        judge_p2p(rec, judge, "vm")


def test_topology_of_a_node_showing_one_gpu_names_the_missing_pair(judge: Judge) -> None:
    """A node that declares 2 GPUs and shows NVML 1 has no pair: said so, never 'nothing was judged'."""
    from gpuaccept.verdicts.nvlink import judge_topology

    with ends(judge, "error", match="no GPU pair to judge: NVML lists 1 GPU"):
        judge_topology({"gpus": [GPUS[0]], "pairs": []}, judge, "vm")
