"""Judging of the benchmark probes with the real thresholds: floors, stragglers, checksums, busy GPUs, errors.

Results are built whole, in the shape the probes emit on 2 x H200 SXM 141GB, and read through the probes' specs
(``GPUBENCH.read``, ``MATMUL.read``) as the tests get them, so a builder that drifts from the contract fails here;
the faults are edits of those results.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.bench import GpuBenchError, GpuBenchRan, MatmulBurnIn, MatmulBusy, MatmulSizes
from gpuaccept.contracts.judge import gpu_label
from gpuaccept.contracts.records import RankRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.probes.specs import GPUBENCH, MATMUL
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
    {"index": 2, "name": "NVIDIA H200", "pci_bus_id": "00000000:00:08.0", "uuid": "GPU-c41a"},
]
PROCESSES = [{"pid": 1516, "name": "python3", "used_mib": 874.0}]
#: what a node-wide or per-GPU result says of a GPU someone else was using
BUSY = [{"gpu": 1, "pci_bus_id": "00000000:00:07.0", "processes": PROCESSES}]
LABELS = [gpu_label(g) for g in GPUS]
ERROR: GpuBenchError = {
    "outcome": "error",
    "error": "no GPU visible (NVML found none, or CUDA_VISIBLE_DEVICES is empty)",
}


@pytest.fixture()
def judge() -> Judge:
    return Judge(load_thresholds(), lambda node: "H200", lambda result: None, "selftest")


def _rank(data: dict[str, Any]) -> RankRecord:
    return RankRecord(node="vm", rank=0, world_size=1, local_rank=0, gpu=None, data=copy.deepcopy(data))


def typed(data: dict[str, Any]) -> GpuBenchRan | GpuBenchError:
    """A node's gpubench result as the tests get it: validated against its spec's type."""
    return GPUBENCH.read(_rank(data)).root


def sample(reasons: int | None = 4, replay: int | None = 0, t: float = 1000.0, gen: int = 5) -> dict[str, Any]:
    """One NVML sample under load (``_gpu.sample``): every key, the power cap a loaded H200 sits at."""
    return {
        "sm_clock_mhz": 1410,
        "mem_clock_mhz": 3201,
        "temperature_c": 60,
        "power_w": 690.0,
        "clock_event_reasons": reasons,
        "pcie_gen": gen,
        "pcie_width": 16,
        "pcie_replay_counter": replay,
        "monotonic_s": t,
    }


def matmul(tflops: float, checksum: int = 1234567, reasons: int | None = 4) -> dict[str, Any]:
    """One GPU's matmul figures (``MatmulFigures``): two sizes, the best one ``tflops``."""

    def size(n: int, value: float, mask: int | None) -> dict[str, Any]:
        return {
            "size": n,
            "tflops": value,
            "tflops_min": value - 2,
            "tflops_max": value + 2,
            "spread_pct": 0.6,
            "batches": 20,
            "calls_per_batch": 10,
            "during": sample(mask),
        }

    return {
        "tflops": tflops,
        "best_size": 8192,
        "sizes": [size(4096, tflops - 20, 4), size(8192, tflops, reasons)],
        "tflops_burst": 760.0,
        "checksum": checksum,
        "data": "normal",
    }


def membw(tbps: float) -> dict[str, Any]:
    size = {"tbps": tbps, "tbps_min": tbps, "tbps_max": tbps, "spread_pct": 0.1, "batches": 20, "calls_per_batch": 10}
    return {"tbps": tbps, "best_size": 2 << 30, "sizes": [{**size, "size": 2 << 30, "during": sample()}]}


NUMA = {
    "bound": True,
    "why": None,
    "gpu_numa_node": -1,
    "local_cpus": 32,
    "allowed_cpus": 32,
    "bound_cpus": 32,
    "all_local": True,
}


def host(h2d: float = 55.5, d2h: float = 55.37, gen: int = 5) -> dict[str, Any]:
    """One GPU's host link alone (``HostLink``)."""
    out: dict[str, Any] = {"numa": NUMA, "pcie_gen_loaded": gen, "pcie_width_loaded": 16}
    for way, gbps in (("h2d", h2d), ("d2h", d2h)):
        out.update(
            {
                f"{way}_gbps": gbps,
                f"{way}_gbps_min": gbps - 0.1,
                f"{way}_gbps_max": gbps + 0.1,
                f"{way}_spread_pct": 0.3,
                f"{way}_attempts": [[gbps, 0.3]],
                f"{way}_during": sample(gen=gen),
            }
        )
    return out


def concurrent(gpus: int) -> dict[str, Any]:
    return {
        "gpus": gpus,
        "h2d_gbps_per_gpu": [41.8] * gpus,
        "h2d_gbps_total": round(41.8 * gpus, 2),
        "h2d_spread_pct_per_gpu": [0.4] * gpus,
        "d2h_gbps_per_gpu": [35.1] * gpus,
        "d2h_gbps_total": round(35.1 * gpus, 2),
        "d2h_spread_pct_per_gpu": [0.4] * gpus,
    }


def raw_bench(part: str, figures: Sequence[dict[str, Any] | None], p2p: dict[str, Any] | None = None) -> dict[str, Any]:
    """A node's gpubench result (``GpuBenchRan``) with ``figures[i]`` as GPU i's ``part``; None: GPU i was busy
    (named in ``busy``, not in ``per_gpu``)."""
    gpus = GPUS[: len(figures)]
    per_gpu = [
        {
            "index": gpu["index"],
            "torch_bus": None,
            "idle": sample(t=1000.0),
            "end": sample(t=1060.0),
            "matmul": None,
            "membw": None,
            "hostbw": None,
            part: found,
        }
        for gpu, found in zip(gpus, figures, strict=True)
        if found is not None
    ]
    busy = [
        {"gpu": gpu["index"], "pci_bus_id": gpu["pci_bus_id"], "processes": PROCESSES}
        for gpu, found in zip(gpus, figures, strict=True)
        if found is None
    ]
    return {
        "outcome": "measured",
        "gpus": gpus,
        "busy": busy,
        "parts": [part],
        "torch": "2.9.0+cu128",
        "per_gpu": per_gpu,
        "hostbw_concurrent": concurrent(len(per_gpu)) if part == "hostbw" and len(per_gpu) > 1 else None,
        "p2p": p2p,
        "phases": {
            "startup_s": 6.1,
            "warmup_s": 2.0,
            "measure_s": 8.0,
            "other_s": 1.5,
            "process_wall_s": 17.6,
            "by_part_s": {"matmul": None, "membw": None, "hostbw": None, "p2p": None, part: 11.5},
        },
        "errors": {"per_gpu.0.torch_bus": "torch's device properties give no PCI bus id"},
    }


def bench(part: str, figures: Sequence[dict[str, Any] | None]) -> GpuBenchRan | GpuBenchError:
    return typed(raw_bench(part, figures))


def test_healthy_matmul_passes(judge: Judge) -> None:
    judge_matmul(bench("matmul", [matmul(664.5), matmul(678.8)]), judge, "vm")
    assert {r.metric for r in judge.results} >= {"matmul_bf16_tflops", "matmul_checksum", "matmul_bf16_burst_tflops"}


def test_a_gpu_that_throttles_under_load_fails_however_fast(judge: Judge) -> None:
    """HW thermal slowdown (0x40) in one size's sample under load fails that GPU, above its TFLOP/s floor;
    the power cap a loaded board sits at (0x4) is reported beside it, and the other GPU passes."""
    figures = [matmul(670.0), matmul(660.0, reasons=0x44)]
    with ends(judge, "failed", match=r"GPU 1 \(00000000:00:07.0\): matmul_clock_events_failing = hw_thermal_slowdown"):
        judge_matmul(bench("matmul", figures), judge, "vm")
    checks = {r.subject: r for r in judge.results if r.metric == "matmul_clock_events_failing"}
    assert checks["0 (00000000:00:06.0)"].verdict == "pass" and checks["0 (00000000:00:06.0)"].value == "none"
    assert checks["1 (00000000:00:07.0)"].extra["reported"] == "sw_power_cap"


def test_clock_events_not_read_under_load_are_an_error(judge: Judge) -> None:
    """No size's sample read the reasons: could not measure, never a pass."""
    figures = [matmul(670.0), matmul(660.0)]
    for size in figures[1]["sizes"]:
        size["during"]["clock_event_reasons"] = None
    with ends(judge, "error", match="matmul_clock_events_failing .*NVML gave no clock-event reasons"):
        judge_matmul(bench("matmul", figures), judge, "vm")


def test_slow_gpu_fails_with_its_name(judge: Judge) -> None:
    with ends(judge, "failed", match=r"vm GPU 1 \(00000000:00:07.0\): matmul_bf16_tflops = 550"):
        judge_matmul(bench("matmul", [matmul(670.0), matmul(550.0)]), judge, "vm")


def test_straggler_above_floor_fails(judge: Judge) -> None:
    # three GPUs, all above the 600 floor, one more than 10% under the node median
    with ends(judge, "failed", match=r"GPU 2 .*more than 10% below vm's median"):
        judge_matmul(bench("matmul", [matmul(680.0), matmul(682.0), matmul(605.0)]), judge, "vm")


def test_checksum_disagreement_names_the_odd_gpu() -> None:
    assert agreement({"0": 5, "1": 5, "2": 7}) == {"0": "match", "1": "match", "2": "differs from the other 2 GPUs"}
    two = agreement({"0": 5, "1": 7})
    assert all(v.startswith("no majority") for v in two.values())


def test_checksum_mismatch_fails(judge: Judge) -> None:
    with ends(judge, "failed", match="matmul_checksum = no majority"):
        judge_matmul(bench("matmul", [matmul(670.0, 1), matmul(670.0, 2)]), judge, "vm")


def test_busy_gpu_is_an_error_naming_only_it(judge: Judge) -> None:
    with ends(judge, "error", match="GPU busy on vm") as caught:
        judge_matmul(bench("matmul", [matmul(670.0), None]), judge, "vm")
    assert "GPU 1 (00000000:00:07.0): pid 1516 python3" in str(caught.value)
    assert "GPU 0" not in str(caught.value)
    assert [(r.subject, r.verdict) for r in judge.results if r.metric == "matmul_bf16_tflops"] == [
        ("0 (00000000:00:06.0)", "pass")
    ]


def test_busy_gpu_and_slow_sibling_is_a_failure(judge: Judge) -> None:
    """A threshold miss on GPU 0 is not hidden behind GPU 1 being busy."""
    with ends(judge, "failed", match=r"matmul_bf16_tflops = 500(.|\n)*also GPU busy on vm"):
        judge_matmul(bench("matmul", [matmul(500.0), None]), judge, "vm")


def burn(tflops: list[float], reasons: int | None = 4, end: int = 99) -> MatmulBurnIn:
    """One ``matmul`` rank's burn-in, read through its spec."""
    intervals = [{"t_s": i * 2.0, "tflops": t, "during": sample(reasons)} for i, t in enumerate(tflops)]
    data = {
        "outcome": "burn_in",
        "busy": [],
        "idle": sample(0),
        "torch_bus": "0000:00:06",
        "torch": "2.9.0+cu128",
        "checksum": 99,
        "checksum_end": end,
        "burn_in": {"size": 8192, "duration_s": 12.0, "interval_s": 2.0, "intervals": intervals},
        "phases": {"startup_s": 6.0, "warmup_s": 1.0, "measure_s": 12.0, "process_wall_s": 19.0},
        "errors": {},
    }
    typed = MATMUL.read(_rank(data)).root
    assert typed["outcome"] == "burn_in"
    return typed


def busy_rank() -> MatmulBusy:
    """A ``matmul`` rank whose GPU someone else was using: not measured."""
    data = {"outcome": "busy", "busy": BUSY, "idle": sample(0), "skipped": "GPU busy", "errors": {}}
    typed = MATMUL.read(_rank(data)).root
    assert typed["outcome"] == "busy"
    return typed


def ranks(*payloads: MatmulBusy | MatmulSizes | MatmulBurnIn) -> list[tuple[str | None, Any]]:
    """The burn-in's ranks as its test hands them over: each GPU's label and its typed payload."""
    return list(zip(LABELS, payloads, strict=False))


def test_burn_in_steady_passes(judge: Judge) -> None:
    judge_burn_in(ranks(burn([668, 667, 666, 667, 665, 666]), burn([675] * 6)), judge, "vm")
    judged = {r.metric for r in judge.results if r.verdict == "pass"}
    expected = {"burnin_tflops_drop_pct", "burnin_checksum", "burnin_checksum_stable", "burnin_clock_events_failing"}
    assert expected <= judged, judged


def test_burn_in_drop_throttle_and_bitflip_fail(judge: Judge) -> None:
    assert tflops_drop_pct(burn([700, 700, 650, 600, 560, 560])["burn_in"]["intervals"]) == 20.0
    with ends(judge, "failed") as caught:
        judge_burn_in(
            ranks(burn([700, 700, 650, 600, 560, 560], reasons=0x4 | 0x40, end=98), burn([675] * 6)),
            judge,
            "vm",
        )
    text = str(caught.value)
    assert "GPU 0 (00000000:00:06.0): burnin_tflops_drop_pct = 20.0" in text
    assert "burnin_clock_events_failing = hw_thermal_slowdown" in text
    assert "burnin_checksum_stable = changed during the burn-in" in text


def test_burn_in_clock_events_never_read_are_an_error_not_none(judge: Judge) -> None:
    """A burn-in whose samples carry no clock-event mask has not shown that no reason was set."""
    unread = burn([675] * 6, reasons=None)
    with ends(judge, "error", match="GPU 1 .*burnin_clock_events_failing .*NVML gave no clock-event reasons"):
        judge_burn_in(ranks(burn([668] * 6), unread), judge, "vm")


def test_a_busy_burn_in_rank_is_an_error_never_a_pass(judge: Judge) -> None:
    """The busy outcome of a ``matmul`` rank: its GPU named busy, the test an ERROR even where its sibling passes;
    a node whose every rank was busy is no pass either."""
    with ends(judge, "error", match=r"GPU busy on vm(.|\n)*GPU 1 \(00000000:00:07.0\): pid 1516"):
        judge_burn_in(ranks(burn([668] * 6), busy_rank()), judge, "vm")
    assert not [r for r in judge.results if r.subject == LABELS[1] and r.verdict == "pass"]
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "error", match="GPU busy on vm"):
        judge_burn_in([(LABELS[1], busy_rank())], j, "vm")


def test_membw_and_hostbw(judge: Judge) -> None:
    judge_membw(bench("membw", [membw(4.258), membw(4.25)]), judge, "vm")
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed") as caught:
        judge_hostbw(bench("hostbw", [host(), host(27.6, 27.5, gen=4)]), j, "vm")
    assert "GPU 1 (00000000:00:07.0): pcie_gen_loaded = 4" in str(caught.value)
    assert "hostbw_h2d_gbps = 27.6" in str(caught.value)
    with ends(judge, "passed"):
        judge_hostbw(window((0, 0), (0, 0)), judge, "vm")
    assert {r.metric for r in judge.results} >= {"hostbw_h2d_concurrent_gbps", "hostbw_d2h_concurrent_total_gbps"}


def window(
    before: tuple[int | None, ...], after: tuple[int | None, ...], seconds: float = 60.0
) -> GpuBenchRan | GpuBenchError:
    """Two healthy host links whose ``idle`` and ``end`` samples hold these replay counter readings."""
    data = raw_bench("hostbw", [host(), host()])
    for entry, first, last in zip(data["per_gpu"], before, after, strict=True):
        entry["idle"] = sample(replay=first, t=1000.0, gen=1)
        entry["end"] = sample(replay=last, t=1000.0 + seconds)
    return typed(data)


def test_pcie_replay_counter_judged_by_its_growth(judge: Judge) -> None:
    """The counter is cumulative: a GPU that logged 5000 replays before the run and none in it passes;
    one whose counter grew faster than DCGM's 8 per minute over the step fails, named with its count."""
    with ends(judge, "passed"):
        judge_hostbw(window((5000, 3), (5000, 11), seconds=60.0), judge, "vm")
    (ok,) = [r for r in judge.results if r.metric == "pcie_replays_per_min" and (r.subject or "").startswith("1 ")]
    assert ok.value == 8.0 and ok.extra["replays"] == 8
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed", match=r"GPU 1 \(00000000:00:07\.0\): pcie_replays_per_min = 9\.0"):
        judge_hostbw(window((0, 0), (0, 3), seconds=20.0), j, "vm")


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
        judge_hostbw(window(before, after), j, "vm")


def raw_p2p(gbps: tuple[float, float] = (395.0, 394.0), crc: int = 0, replay: int = 0) -> dict[str, Any]:
    """A two-GPU node's gpubench result holding only its pairs (``P2pMeasured``), untyped for edits."""
    pairs = [
        {
            "src": src,
            "dst": dst,
            "src_bus": GPUS[src]["pci_bus_id"],
            "dst_bus": GPUS[dst]["pci_bus_id"],
            "gbps": value,
            "gbps_min": value - 1,
            "gbps_max": value + 1,
            "spread_pct": 0.5,
            "round": src,
            "peer_access": True,
        }
        for (src, dst), value in zip(((0, 1), (1, 0)), gbps, strict=True)
    ]
    errors: list[dict[str, Any]] = [
        {
            "gpu": g,
            "seconds": 2.0,
            "crc_flit": crc,
            "crc_data": 0,
            "replay": replay,
            "recovery": 0,
            "per_link": {"crc_flit": {}, "crc_data": {}},
            "links": 18,
            "unread_links": {},
        }
        for g in (0, 1)
    ]
    measured = {
        "outcome": "measured",
        "size": 1 << 30,
        "pairs": pairs,
        "matrix": {"gpus": [0, 1], "gbps": [[None, gbps[0]], [gbps[1], None]]},
        "nvlink_errors": errors,
    }
    return raw_bench("matmul", [matmul(670.0), matmul(670.0)], p2p=measured)


def p2p(gbps: tuple[float, float] = (395.0, 394.0), crc: int = 0, replay: int = 0) -> GpuBenchRan | GpuBenchError:
    return typed(raw_p2p(gbps, crc, replay))


def test_p2p_healthy_and_slow_pair(judge: Judge) -> None:
    matrix = judge_p2p(p2p(), judge, "vm")
    assert matrix is not None and matrix["gbps"][0][1] == 395.0
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
    record = raw_p2p()
    for entry in record["p2p"]["nvlink_errors"]:
        entry.update(crc_flit=None, crc_data=None, replay=None, recovery=None)
    with ends(judge, "error") as ended:
        judge_nvlink_under_load(typed(record), judge, "vm")
    for metric in ("crc_flit_per_s", "crc_data_per_s", "replay_errors", "recovery_errors"):
        assert f"vm GPU 1 (00000000:00:07.0): p2p_nvlink_{metric} (" in ended.value, ended.value


def test_nvlink_error_unread_link_named(judge: Judge) -> None:
    """One link NVML would not read: could not measure, naming the GPU and the link (never a legacy 0)."""
    record = raw_p2p()
    record["p2p"]["nvlink_errors"][1].update(replay=None, unread_links={"replay": [11]})
    with ends(
        judge,
        "error",
        match=r"GPU 1 \(00000000:00:07.0\): p2p_nvlink_replay_errors \(.*"
        r"could not read replay on link\(s\) 11",
    ):
        judge_nvlink_under_load(typed(record), judge, "vm")


def test_nvlink_errors_name_the_links() -> None:
    """Errors on one link say so (a port or cable to look at); spread over all links say that."""
    record = raw_p2p(crc=400)
    for entry in record["p2p"]["nvlink_errors"]:
        entry.update(links=18, per_link={"crc_flit": {"7": 390, "3": 10}, "crc_data": {}})
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "failed", match=r"400 CRC flit errors in 2.0 s on 2 of 18 links, most on link 7 \(390\)"):
        judge_nvlink_under_load(typed(record), j, "vm")


def test_p2p_busy_names_the_gpu(judge: Judge) -> None:
    skipped = {"outcome": "busy", "size": 1 << 30, "skipped": "GPU busy: other processes were running"}
    rec = typed(raw_bench("matmul", [matmul(670.0), None], p2p=skipped))
    for judged in (judge_p2p, judge_nvlink_under_load):
        j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
        with ends(j, "error", match=r"GPU 1 \(00000000:00:07.0\): pid 1516"):
            judged(rec, j, "vm")
        assert not [r for r in j.results if r.verdict == "pass"], judged


JUDGES = [judge_matmul, judge_membw, judge_hostbw, judge_p2p, judge_nvlink_under_load]


@pytest.mark.parametrize("judged", JUDGES, ids=[f.__name__ for f in JUDGES])
def test_a_gpubench_that_could_not_measure_is_an_error_never_failed(judged: Any) -> None:
    """gpubench's error outcome (no GPU visible): every judge of its parts says could-not-measure, naming why."""
    j = Judge(load_thresholds(), lambda n: "H200", lambda r: None, "t")
    with ends(j, "error", match="gpubench measured no GPU \\(no GPU visible"):
        judged(typed(dict(ERROR)), j, "vm")


def test_a_part_not_run_is_an_error(judge: Judge) -> None:
    """A result without the part (``--parts`` left it out) is its check unreadable, never a pass."""
    with ends(judge, "error", match="holds no membw figures"):
        judge_membw(bench("matmul", [matmul(670.0), matmul(670.0)]), judge, "vm")


def test_topology_of_a_node_showing_one_gpu_names_the_missing_pair(judge: Judge) -> None:
    """A node that declares 2 GPUs and shows NVML 1 has no pair: said so, never 'nothing was judged'."""
    from gpuaccept.verdicts.nvlink import judge_topology

    with ends(judge, "error", match="no GPU pair to judge: NVML lists 1 GPU"):
        judge_topology({"gpus": [GPUS[0]], "pairs": []}, judge, "vm")
