"""The one-process node benchmark (``probes.gpubench``) end to end on a CPU, against fake CUDA and NVML.

``FakeTorch`` is the real (CPU) torch with ``torch.cuda`` replaced: every "GPU" is the CPU, events read
the wall clock (CPU ops finish before ``record`` returns, so the elapsed time is the work's), and the
devices the probe names (``cuda:3``) all map to the CPU. That runs the probe's own control flow on a
machine without a GPU: lanes queued round-robin, the host links one GPU at a time with NUMA binding,
all at once afterwards, GPU pairs in rounds, busy GPUs left out, the phases, one sentinel line; and the
area judges (verdicts.compute, verdicts.memory) read the result as the tests do.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch as real_torch

from gpuaccept.contracts.bench import NumaBinding, best_size_figure
from gpuaccept.contracts.payloads import Sample
from gpuaccept.dispatch.result import parse_records
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import _bench, _gpu, _nvml, gpubench, hostbw, matmul, membw, p2p
from gpuaccept.probes.specs import GPUBENCH, MATMUL
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts import compute, memory

from .test_gpu_probes import FakeNVML

pytestmark = pytest.mark.selftest


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, other: FakeEvent) -> float:
        assert self.t is not None and other.t is not None, "elapsed_time on an event never recorded"
        return max(1e-6, (other.t - self.t) * 1000)


class FakeCuda:
    Event = FakeEvent

    def __init__(self, count: int) -> None:
        self.count = count
        self.synced: list[Any] = []

    def synchronize(self, device: Any = None) -> None:
        self.synced.append(device)

    def current_stream(self, device: Any = None) -> Any:
        return ("stream", str(device))

    def empty_cache(self) -> None:
        return None

    def device_count(self) -> int:
        return self.count

    def is_available(self) -> bool:
        return True

    def can_device_access_peer(self, a: int, b: int) -> bool:
        return True

    def get_device_properties(self, ordinal: int) -> Any:
        return types.SimpleNamespace(
            pci_domain_id=0, pci_bus_id=int(FakeNVML().bus(ordinal)[9:11], 16), pci_device_id=0
        )

    @contextlib.contextmanager
    def device(self, device: Any) -> Iterator[None]:
        yield


class FakeTorch:
    """Real CPU torch, with every CUDA device mapped to the CPU and ``torch.cuda`` faked."""

    __version__ = "fake"

    def __init__(self, count: int) -> None:
        self.cuda = FakeCuda(count)
        self.devices: list[str] = []

    def device(self, kind: str, index: int | None = None) -> Any:
        self.devices.append(f"{kind}:{index}")
        return real_torch.device("cpu")

    def _strip(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        kwargs.pop("pin_memory", None)
        if "device" in kwargs:
            kwargs["device"] = "cpu"
        return kwargs

    def empty(self, *args: Any, **kwargs: Any) -> Any:
        return real_torch.empty(*args, **self._strip(kwargs))

    def zeros(self, *args: Any, **kwargs: Any) -> Any:
        return real_torch.zeros(*args, **self._strip(kwargs))

    def randn(self, *args: Any, **kwargs: Any) -> Any:
        return real_torch.randn(*args, **self._strip(kwargs))

    def arange(self, *args: Any, **kwargs: Any) -> Any:
        return real_torch.arange(*args, **self._strip(kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(real_torch, name)


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Any:
    """Run ``gpubench.main`` on a fake 4-GPU node; returns (output record data, fake NVML, fake torch)."""

    def run(argv: list[str], count: int = 4, busy: dict[int, int] | None = None) -> tuple[Any, FakeNVML, FakeTorch]:
        lib = FakeNVML(count, busy=busy)
        for module in (_nvml, _bench):
            monkeypatch.setattr(module, "nvml", lambda: lib)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        fake = FakeTorch(count)
        monkeypatch.setitem(sys.modules, "torch", fake)
        # CPU-sized work: one call per batch, tiny checksum product
        monkeypatch.setattr(matmul, "CHECK_N", 32)
        for module in (matmul, membw, hostbw, p2p):
            monkeypatch.setattr(module, "_batch", lambda size: 1)
        gpubench.main(argv)
        out = capsys.readouterr().out
        (record,) = parse_records("gpubench", out, 1, (record_node(),))
        # what the probe emits is its spec's payload type, as the cluster validates it where the result arrives
        return GPUBENCH.read(record).root, lib, fake

    return run


SMALL = [
    "--sizes=32,64",
    "--matmul-repeats=3",
    "--matmul-warmup=0",
    "--membw-size=64K",
    "--membw-repeats=3",
    "--membw-warmup=0",
    "--hostbw-size=64K",
    "--hostbw-repeats=3",
    "--hostbw-warmup=0",
    "--p2p-size=64K",
    "--p2p-repeats=3",
    "--p2p-warmup=0",
]


def record_node() -> str:
    from gpuaccept.probes._protocol import node_name

    return node_name()


def test_every_part_on_every_gpu(bench: Any) -> None:
    data, _, _ = bench(SMALL)
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2, 3]
    for entry in data["per_gpu"]:
        assert set(entry) >= {"matmul", "membw", "hostbw"}, entry.keys()
        assert [f["size"] for f in entry["matmul"]["sizes"]] == [32, 64]
        assert entry["matmul"]["sizes"][1]["batches"] == 3
        # both directions measured (figures rounded to 0.01 GB/s: at a load average of 40 this CPU stand-in's
        # 64 KiB copies once rounded to 0.0, so the plumbing is checked, not the stand-in's speed)
        for way in ("h2d", "d2h"):
            assert isinstance(entry["hostbw"][f"{way}_gbps"], float) and entry["hostbw"][f"{way}_gbps"] >= 0
            assert entry["hostbw"][f"{way}_gbps_max"] >= entry["hostbw"][f"{way}_gbps_min"]
    # every GPU got the same fixed-seed product
    assert len({entry["matmul"]["checksum"] for entry in data["per_gpu"]}) == 1
    # 4 GPUs: 12 ordered pairs in 6 rounds of 2 disjoint pairs
    pairs = data["p2p"]["pairs"]
    assert len(pairs) == 12 and len({(p["src"], p["dst"]) for p in pairs}) == 12
    assert {p["round"] for p in pairs} == set(range(6))
    assert len(data["p2p"]["nvlink_errors"]) == 4
    assert data["hostbw_concurrent"]["gpus"] == 4
    assert len(data["hostbw_concurrent"]["h2d_gbps_per_gpu"]) == 4
    phases = data["phases"]
    assert all(seconds is not None for seconds in phases["by_part_s"].values())
    for key in ("startup_s", "warmup_s", "measure_s", "other_s", "process_wall_s"):
        assert phases[key] >= 0, key
    assert phases["process_wall_s"] >= phases["startup_s"]


def test_host_links_bound_to_their_numa_cpus(bench: Any) -> None:
    """The fake names CPUs 0-31 local to GPUs 0-3 and 32-63 to GPUs 4-7; the step allows this box's CPUs."""
    before = os.sched_getaffinity(0)
    data, _, _ = bench([*SMALL, "--parts=hostbw"], count=8)
    assert os.sched_getaffinity(0) == before, "the thread's affinity was not restored"
    numa = [entry["hostbw"]["numa"] for entry in data["per_gpu"]]
    allowed_low = bool(before & set(range(32)))
    assert [n["bound"] for n in numa[:4]] == [allowed_low] * 4
    assert all(not n["bound"] for n in numa[4:] if not before & set(range(32, 64)))
    assert data["per_gpu"][0]["matmul"] is None and data["p2p"] is None and data["parts"] == ["hostbw"]


def _judge() -> Judge:
    """The real judging core on the ``cpu`` SKU: the stand-in's figures have no limit there, so every
    figure is recorded ``unjudged`` and these tests read which checks the judges made."""
    return Judge(load_thresholds(), lambda node: "cpu", lambda result: None, "selftest")


def test_busy_gpu_is_named_and_left_out(bench: Any) -> None:
    data, _, _ = bench(SMALL, busy={2: 4242})
    assert [entry["index"] for entry in data["per_gpu"]] == [0, 1, 3] and data["per_gpu"][1]["matmul"] is not None
    assert data["p2p"] is not None and data["p2p"]["outcome"] == "busy"
    assert data["p2p"]["skipped"].startswith("GPU busy")
    judge = _judge()
    compute.judge_matmul(data, judge, "n1")
    (busy,) = [r for r in judge.results if r.verdict == "unmeasured"]
    assert busy.where == "n1 GPU 2 (00000000:3A:00.0)" and "pid 4242" in busy.reason, busy
    assert {r.subject for r in judge.results if r.metric == "matmul_bf16_tflops"} == {
        "0 (00000000:18:00.0)",
        "1 (00000000:2A:00.0)",
        "3 (00000000:5D:00.0)",
    }


def test_judges_read_the_bench_as_the_tests_do(bench: Any) -> None:
    data, _, _ = bench(SMALL, count=2)
    judge = _judge()
    memory.judge_hostbw(data, judge, "n1")
    metrics = [(r.metric, r.subject) for r in judge.results]
    assert ("hostbw_h2d_gbps", "1 (00000000:2A:00.0)") in metrics
    assert ("hostbw_d2h_concurrent_gbps", "0 (00000000:18:00.0)") in metrics
    assert ("hostbw_h2d_concurrent_total_gbps", None) in metrics
    # the PCIe replay counter's window: read before the parts (idle) and after them (end), judged by its growth
    first, last = data["per_gpu"][1]["idle"], data["per_gpu"][1]["end"]
    assert first["pcie_replay_counter"] == last["pcie_replay_counter"] == 0
    assert last["monotonic_s"] > first["monotonic_s"]
    (replays,) = [
        r for r in judge.results if r.metric == "pcie_replays_per_min" and r.subject == "1 (00000000:2A:00.0)"
    ]
    assert replays.value == 0 and replays.verdict == "pass", replays
    judge = _judge()
    memory.judge_membw(data, judge, "n1")
    assert len([r for r in judge.results if r.metric == "membw_tbps"]) == 2
    judge = _judge()
    memory.judge_p2p(data, judge, "n1")
    assert len([r for r in judge.results if r.metric == "p2p_gbps"]) == 2


def test_lanes_wait_before_the_driver_queue_fills(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane never has more than MAX_QUEUED_LAUNCHES queued: it waits for its oldest batch first."""
    waits: list[int] = []

    class CountingEvent(FakeEvent):
        def synchronize(self) -> None:
            waits.append(1)

    fake = FakeTorch(2)
    fake.cuda.Event = CountingEvent  # type: ignore[misc]
    monkeypatch.setattr(_bench, "MAX_QUEUED_LAUNCHES", 10)
    calls = [0, 0]
    lanes = [
        _bench.Lane("cuda:0", lambda: calls.__setitem__(0, calls[0] + 1)),
        _bench.Lane("cuda:1", lambda: calls.__setitem__(1, calls[1] + 1)),
    ]
    times = _bench.time_lanes(fake, lanes, batch=3, repeats=5, warmup_s=0.0)
    assert [len(t) for t in times] == [5, 5]
    assert calls == [18, 18]  # one untimed batch of 3, then 5 timed batches of 3
    assert len(waits) == 2 * (5 - 10 // 5), waits  # window of 2 batches per lane


def test_phases_start_at_the_process_start() -> None:
    from gpuaccept.probes._timing import Phases, process_age_s

    age = process_age_s()
    assert age is not None and age > 0
    phases = Phases()
    phases.mark("startup")
    with phases.phase("measure"):
        time.sleep(0.01)
    out = phases.as_dict()
    assert out["startup_s"] >= age - 0.05 and out["measure_s"] >= 0.01
    assert out["process_wall_s"] >= out["startup_s"] + out["measure_s"] - 0.002  # each rounded to 1 ms


def test_cpu_affinity_as_hostbw_reads_it() -> None:
    """``_gpu.cpu_affinity`` decodes NVML's mask the way hostbw's binding reads it."""
    lib = FakeNVML(8)
    assert _gpu.cpu_affinity(lib, 5)[:2] == [32, 33]
    assert _gpu.cpu_affinity(lib, 1)[-1] == 31


class _StubPre(_bench.Preflight):
    """A preflight whose every NVML sample shows a Gen5 x16 link."""

    def __init__(self) -> None:
        super().__init__(None, [], [])

    def sample(self, ordinal: int = 0) -> Sample | None:
        return {
            "sm_clock_mhz": None,
            "mem_clock_mhz": None,
            "temperature_c": None,
            "power_w": None,
            "clock_event_reasons": None,
            "pcie_gen": 5,
            "pcie_width": 16,
            "pcie_replay_counter": None,
            "monotonic_s": 1.0,
        }


NUMA: NumaBinding = {
    "bound": False,
    "why": "--no-bind",
    "gpu_numa_node": None,
    "local_cpus": 0,
    "allowed_cpus": 2,
    "bound_cpus": 0,
    "all_local": False,
}


def test_a_gpubench_without_gpus_is_the_error_outcome(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """No GPU visible: the probe writes the ``error`` outcome, which its type holds and the judges read as ERROR."""
    monkeypatch.setattr(_bench, "nvml", lambda: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    gpubench.main(SMALL)
    (record,) = parse_records("gpubench", capsys.readouterr().out, 1, (record_node(),))
    data = GPUBENCH.read(record).root
    assert data["outcome"] == "error" and "no GPU visible" in data["error"]


def _scripted_windows(monkeypatch: pytest.MonkeyPatch, windows: list[list[float]]) -> list[int]:
    """hostbw's timed windows replaced by scripted GB/s per batch (1 GiB batches); returns the call count."""
    calls: list[int] = []

    def fake_time_lanes(torch: Any, lanes: Any, **kwargs: Any) -> list[list[float]]:
        rates = windows[min(len(calls), len(windows) - 1)]
        calls.append(1)
        return [[(1 << 30) / (rate * 1e9) for rate in rates]]

    monkeypatch.setattr(hostbw, "time_lanes", fake_time_lanes)
    return calls


def test_a_disturbed_host_link_window_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window whose batches spread like those of one H100 80GB HBM3 on 2026-11-23 (27.8-54.7 GB/s) is measured again,
    the steady attempt ends it and the best is reported, each attempt on the record."""
    calls = _scripted_windows(monkeypatch, [[27.8, 35.0, 40.4, 54.7, 50.1, 30.2], [55.0, 55.1, 55.0, 55.2, 55.1, 55.0]])
    out = hostbw._link(None, _StubPre(), 0, "cuda:0", (None, None), 1 << 30, 6, 0.0, NUMA)
    assert out["h2d_gbps"] == 55.05 and (out["h2d_spread_pct"] or 0) < 1
    assert [a[0] for a in out["h2d_attempts"]] == [37.7, 55.05]
    assert len(calls) == 2 + 1  # h2d twice, d2h steady at once


def test_a_link_slow_in_every_batch_is_reported_slow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A link trained down (Gen4 x16: about 26 GB/s in every batch) is steady, measured once, and slow."""
    calls = _scripted_windows(monkeypatch, [[26.1, 26.2, 26.0, 26.1, 26.2, 26.1]])
    out = hostbw._link(None, _StubPre(), 0, "cuda:0", (None, None), 1 << 30, 6, 0.0, NUMA)
    assert out["h2d_gbps"] == 26.1 and out["d2h_gbps"] == 26.1
    assert len(out["h2d_attempts"]) == 1 and len(calls) == 2


def test_three_disturbed_windows_report_the_best(monkeypatch: pytest.MonkeyPatch) -> None:
    """As seen on one H100 80GB HBM3 (2026-11-23): three disturbed windows (medians 47.63, 54.95, 54.07): the best is
    the link's."""
    windows = [
        [40.0, 47.6, 47.66, 48.0, 44.0, 52.0],
        [30.0, 54.9, 55.0, 55.1, 55.2, 40.0],
        [50.0, 54.0, 54.14, 55.0, 53.0, 57.0],
    ]
    calls = _scripted_windows(monkeypatch, windows)
    out = hostbw._link(None, _StubPre(), 0, "cuda:0", (None, None), 1 << 30, 6, 0.0, NUMA)
    assert [a[0] for a in out["h2d_attempts"]] == [47.63, 54.95, 54.07]
    assert out["h2d_gbps"] == 54.95
    assert len(calls) == 3 + 3  # every window of the scripted run is disturbed: d2h too takes three


@pytest.fixture()
def matmul_rank(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> Any:
    """Run ``matmul.main`` as one rank on a fake GPU; returns its payload read through its spec (``MATMUL``)."""

    def run(argv: list[str], busy: dict[int, int] | None = None) -> Any:
        lib = FakeNVML(1, busy=busy)
        for module in (_nvml, _bench):
            monkeypatch.setattr(module, "nvml", lambda: lib)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        monkeypatch.setitem(sys.modules, "torch", FakeTorch(1))
        monkeypatch.setattr(matmul, "CHECK_N", 32)
        monkeypatch.setattr(matmul, "_batch", lambda size: 1)
        matmul.main(argv)
        (record,) = parse_records("matmul", capsys.readouterr().out, 1, (record_node(),))
        return MATMUL.read(record).root

    return run


def test_a_matmul_rank_writes_its_sizes_outcome(matmul_rank: Any) -> None:
    data = matmul_rank(["--sizes=32,64", "--repeats=3", "--warmup=0"])
    assert data["outcome"] == "sizes" and [f["size"] for f in data["sizes"]] == [32, 64]
    assert (
        best_size_figure(data)["size"] == data["best_size"]
        and max(f["tflops"] for f in data["sizes"]) == data["tflops"]
    )
    assert data["sizes"][0]["during"] is not None and data["tflops_burst"] is not None
    assert set(data["phases"]) == {"startup_s", "warmup_s", "measure_s", "process_wall_s"}


def test_a_matmul_burn_in_writes_its_intervals_and_both_checksums(matmul_rank: Any) -> None:
    data = matmul_rank(["--sizes=32", "--burn-in=0.3", "--interval=0.1"])
    assert data["outcome"] == "burn_in" and data["checksum_end"] == data["checksum"]
    assert data["burn_in"]["intervals"] and all(i["during"] is not None for i in data["burn_in"]["intervals"])


def test_a_busy_matmul_rank_writes_the_busy_outcome(matmul_rank: Any) -> None:
    data = matmul_rank(["--sizes=32"], busy={0: 4242})
    assert data["outcome"] == "busy" and data["busy"][0]["processes"][0]["pid"] == 4242
    assert "checksum" not in data and "tflops" not in data


def test_a_reading_written_none_has_its_errors_entry(bench: Any) -> None:
    """A reading the GPU did not give is None with an ``errors`` entry by its path; one it gave has none."""
    data, _, _ = bench([*SMALL, "--parts=hostbw"], count=2)
    assert data["errors"] == {}
    entry = copy.deepcopy(data["per_gpu"][1])
    entry["torch_bus"] = None
    entry["hostbw"]["pcie_width_loaded"] = None
    errors = gpubench._errors([data["per_gpu"][0], entry])
    assert set(errors) == {"per_gpu.1.torch_bus", "per_gpu.1.hostbw.pcie_width_loaded"}
    assert "nvmlDeviceGetCurrPcieLinkWidth" in errors["per_gpu.1.hostbw.pcie_width_loaded"]
