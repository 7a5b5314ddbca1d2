"""The NVML-reading probes run against a fake pynvml shaped like an 8-GPU HGX H100 node.

The fake answers the calls the probes make with the return types nvidia-ml-py gives (ctypes-like
objects with ``busId``/``total``/``pid``, NVMLError subclasses for "not supported"), so a typo in a
getter or a wrong return-shape assumption breaks here on a CPU machine, not on the GPU node.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpuaccept.contracts.nvml import nvml_fields
from gpuaccept.contracts.payloads import GpuHealth
from gpuaccept.contracts.records import RankRecord
from gpuaccept.probes import _bench, _gpu, _nvml, _protocol, fingerprint, gpu_health, nvlink, xid
from gpuaccept.probes.specs import GPU_HEALTH, NVLINK, PayloadError
from gpuaccept.verdicts.gpu_health import judge_health
from gpuaccept.verdicts.nvlink import judge_nvlink, judge_topology

from .nvml_recordings import current
from .nvml_replay import ReplayNVML

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]
BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


class FakeNVML:
    """Just enough of pynvml for gpu_health, nvlink, xid and the benchmarks' preflight."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported

    def __init__(self, count: int = 8, *, busy: dict[int, int] | None = None, links: int = 18) -> None:
        for name in dir(pynvml):
            if name.startswith("NVML_"):
                setattr(self, name, getattr(pynvml, name))
        self.count = count
        self.busy = busy or {}
        self.links = links
        self.reasons = {i: 0x1 for i in range(count)}  # GpuIdle
        self.remap = {i: (0, 0, 0, 0) for i in range(count)}
        self.unread_counters: set[int] = set()  # links whose data counters answer "not supported"

    # -- system ----------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "13.580.95.05"

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        return b"python3"

    # -- identity --------------------------------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < self.count:
            raise pynvml.NVMLError_InvalidArgument()
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return int(uuid.rsplit("-", 1)[1])

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-00000000-0000-0000-0000-00000000000{h}"

    def bus(self, h: int) -> str:
        return f"00000000:{BUSES[h].upper()}:00.0"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return types.SimpleNamespace(busId=self.bus(h).encode())

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetSerial(self, h: int) -> str:
        return f"165202301{h:04d}"

    def nvmlDeviceGetVbiosVersion(self, h: int) -> str:
        return "96.00.99.00.01"

    # -- health ----------------------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return types.SimpleNamespace(total=81559 * 2**20, used=0, free=81559 * 2**20)

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return 1

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return [1, 1]

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return self.remap[h]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        raise pynvml.NVMLError_NotSupported()

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.reasons[h]

    def nvmlDeviceGetSupportedClocksEventReasons(self, h: int) -> int:
        return 0x1FF

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return 1  # idle: power management dropped the link to Gen1

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return 5

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: int) -> int:
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return 16

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return 0

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 31

    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int:
        return {pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: 87, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: 92}[kind]

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int | tuple[int, int]]) -> list[Any]:
        """Memory temperature, the common link speed, the link count, and each link's data counters (KiB,
        the link's number times 1000 sent, and 7 more received): anything else is not supported (3)."""
        data = (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        out = []
        for field in ids:
            fid, link = field if isinstance(field, tuple) else (field, None)
            values = {
                pynvml.NVML_FI_DEV_MEMORY_TEMP: 40,
                pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: 26562,
                pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: 18,
            }
            if fid in data and link is not None and link not in self.unread_counters:
                values[fid] = link * 1000 + (7 if fid == data[1] else 0)
            value = values.get(fid)
            out.append(
                types.SimpleNamespace(
                    nvmlReturn=3 if value is None else 0, valueType=3, value=types.SimpleNamespace(ullVal=value)
                )
            )
        return out

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 71234

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return 700000

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 345 if kind == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return types.SimpleNamespace(gpu=0, memory=0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        if h in self.busy:
            return [types.SimpleNamespace(pid=self.busy[h], usedGpuMemory=1234 * 2**20)]
        return []

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return []

    def nvmlDeviceGetCpuAffinity(self, h: int, words: int) -> list[int]:
        mask = (0xFFFFFFFF << 32) if h >= 4 else 0xFFFFFFFF
        return [mask] + [0] * (words - 1)

    # -- NVLink and topology ---------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 18:
            raise pynvml.NVMLError_InvalidArgument()
        return 1 if link < self.links else 0

    def nvmlDeviceGetNvLinkVersion(self, h: int, link: int) -> int:
        return 4

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        return types.SimpleNamespace(busId=b"00000000:00:00.0")

    def nvmlDeviceGetNvLinkErrorCounter(self, h: int, link: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return pynvml.NVML_TOPOLOGY_NODE if (a < 4) == (b < 4) else pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        return pynvml.NVML_P2P_STATUS_OK


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNVML:
    lib = FakeNVML()
    for module in (_nvml, gpu_health, nvlink, xid, _bench, _protocol, fingerprint):
        monkeypatch.setattr(module, "nvml", lambda: lib)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return lib


class Recorder:
    """A stand-in for the ``judge`` fixture that keeps every call (judging is tested elsewhere)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, Any]] = []

    def check(self, metric: str, value: Any, *, node: str, gpu: Any = None, **extra: Any) -> None:
        self.calls.append(("check", metric, value, gpu))

    def info(self, metric: str, value: Any, *, node: str, gpu: Any = None, **extra: Any) -> None:
        self.calls.append(("info", metric, value, gpu))

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, gpu: Any = None, **extra: Any) -> None:
        self.calls.append(("expect", name, observed, gpu))

    def unreadable(self, metric: str, why: str, *, node: str, gpu: Any = None, **extra: Any) -> None:
        self.calls.append(("unreadable", metric, why, gpu))

    def declared(self, metric: str, node: str, scale: int | None = None) -> Any:
        return types.SimpleNamespace(min=18) if metric == "nvlink_links_active" else None

    def sku(self, node: str) -> str:
        return "H100"

    def stragglers(self, metric: str) -> list[Any]:
        return []

    def verify(self) -> None:
        return None


def test_gpu_health_collect_reads_every_gpu(fake: FakeNVML) -> None:
    data = gpu_health.collect()
    assert data["driver"] == "580.95.05" and data["cuda_driver"] == "13.0"
    assert len(data["gpus"]) == 8
    gpu = data["gpus"][3]
    assert gpu["pci_bus_id"] == "00000000:5D:00.0"
    assert gpu["memory_total_mib"] == 81559
    assert gpu["retired_pages_pending"] is None and gpu["errors"]["retired_pages_pending"] == "NVMLError_NotSupported"
    assert gpu["pcie"] == {
        "gen_current": 1,
        "width_current": 16,
        "gen_max": 5,
        "width_max": 16,
        "gen_gpu_max": 5,
        "replay_counter": 0,
    }
    assert gpu["memory_temperature_c"] == 40 and gpu["power_limit_w"] == 700.0
    assert len(gpu["cpu_affinity"]) == 32
    typed = GPU_HEALTH.read(RankRecord("n1", 0, 1, 0, None, json.loads(json.dumps(data))))  # JSON, its type
    # a getter a field declares that this hand-written NVML lacks (a field added since it was written) reads None
    lacked = {
        n: "AttributeError"
        for n, (how, _) in nvml_fields(GpuHealth).items()
        if how.call and not hasattr(fake, how.call)
    }
    assert typed["gpus"][3]["errors"] == {"retired_pages_pending": "NVMLError_NotSupported", **lacked}


def test_a_reading_nvml_refused_is_none_with_its_reason_and_unexplained_none_is_refused(fake: FakeNVML) -> None:
    """The probe keys a refused getter's error by the field it fills; the type refuses a None nothing explains."""
    data = json.loads(json.dumps(gpu_health.collect()))
    assert data["gpus"][0]["retired_pages_pending"] is None
    del data["gpus"][0]["errors"]["retired_pages_pending"]
    with pytest.raises(PayloadError, match=r"gpus\.0: .*no errors entry saying why: retired_pages_pending"):
        GPU_HEALTH.validate(RankRecord("n1", 0, 1, 0, None, data))


def test_the_probe_reads_the_recorded_h200_back_through_its_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``GpuHealth`` field that declares its NVML getter is filled by walking the markers: NVML answering
    as the recorded H200 did (``nvml_replay``), the probe writes the current recording's readings and errors again."""
    recording = json.loads(current("gpu_health").read_text())
    monkeypatch.setattr(gpu_health, "nvml", lambda: ReplayNVML(recording))
    data = json.loads(json.dumps(gpu_health.collect()))
    GPU_HEALTH.validate(RankRecord("n1", 0, 1, 0, None, data))
    marked = [*nvml_fields(GpuHealth), "remapped_rows", "pcie", "clocks", "cpu_affinity", "errors", "processes"]
    assert marked[0] == "memory_total_mib" and len(marked) > 25
    for read, recorded in zip(data["gpus"], recording["gpus"], strict=True):
        assert {k: read[k] for k in marked} == {k: recorded[k] for k in marked}
    assert {k: data[k] for k in ("driver", "cuda_driver", "nvml_version")} == {
        k: recording[k] for k in ("driver", "cuda_driver", "nvml_version")
    }


def test_a_getter_the_library_lacks_is_that_readings_error(fake: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older nvidia-ml-py without a getter a field declares: that field is None with its error, the probe runs."""
    monkeypatch.delattr(FakeNVML, "nvmlDeviceGetVbiosVersion")
    gpu = gpu_health.collect()["gpus"][0]
    assert gpu["vbios"] is None and gpu["errors"]["vbios"] == "AttributeError" and gpu["serial"]


def test_gpu_health_dump_and_load_round_trip(fake: FakeNVML, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    dump = tmp_path / "nvml.json"
    gpu_health.main(["--dump", str(dump)])
    live = capsys.readouterr().out
    gpu_health.main(["--load", str(dump)])
    assert capsys.readouterr().out == live


def test_nvlink_collect_counts_switch_links_per_pair(fake: FakeNVML, tmp_path: Path) -> None:
    data = nvlink.collect(tmp_path)  # an empty sysfs: no HCAs, NUMA unreadable
    NVLINK.validate(RankRecord("n1", 0, 1, 0, None, json.loads(json.dumps(data))))  # every key, as it arrives
    assert [g["nvlink"]["active"] for g in data["gpus"]] == [18] * 8
    assert data["gpus"][0]["nvlink"]["errors"]["source"] == "per_link"
    assert len(data["pairs"]) == 28
    assert {p["label"] for p in data["pairs"]} == {"NV18"}
    assert {p["pcie"] for p in data["pairs"]} == {"NODE", "SYS"}
    recorder = Recorder()
    judge_topology(data, recorder, "n1")
    assert sum(1 for c in recorder.calls if c[1] == "nvlink_pair_links" and c[2] == 18) == 28


def test_nvlink_down_link_is_counted(fake: FakeNVML, tmp_path: Path) -> None:
    fake.links = 17
    data = nvlink.collect(tmp_path)
    recorder = Recorder()
    judge_nvlink(data, recorder, "n1")
    active = [c for c in recorder.calls if c[1] == "nvlink_links_active"]
    assert {c[2] for c in active} == {17}
    assert {p["label"] for p in data["pairs"]} == {"NV17"}


def test_health_judge_sees_faults_from_the_fake(fake: FakeNVML) -> None:
    fake.reasons[5] = 0x1 | 0x40  # idle + HW thermal slowdown
    fake.remap[2] = (0, 1, 1, 0)  # one uncorrectable row, remap pending
    data = gpu_health.collect()
    recorder = Recorder()
    judge_health(data, recorder, "n1", declared_gpus=8)
    checks = {(c[1], c[3]): c[2] for c in recorder.calls if c[0] == "check"}
    assert checks[("gpu_clock_events_failing", "5 (00000000:AB:00.0)")] == "hw_thermal_slowdown"
    assert checks[("gpu_remapped_rows_pending", "2 (00000000:3A:00.0)")] == 1
    assert checks[("gpu_clock_events_failing", "0 (00000000:18:00.0)")] == "none"


def test_preflight_names_foreign_processes_before_cuda(fake: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.busy = {1: 4242}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    pre = _bench.preflight(1)
    assert pre.gpus[0]["index"] == 1
    assert pre.busy == [
        {
            "gpu": 1,
            "pci_bus_id": "00000000:2A:00.0",
            "processes": [{"pid": 4242, "name": "python3", "used_mib": 1234.0}],
        }
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _bench.preflight(1).busy == []


def test_a_ranks_identity_is_the_preflights(fake: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch probes' ``gpu_identity`` and the benchmarks' preflight read a GPU's identity one way."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,2")
    assert _protocol.gpu_identity(1) == _bench.preflight(2).gpus[1]
    assert _protocol.gpu_identity(1)["index"] == 2  # type: ignore[index]
    monkeypatch.setattr(_protocol, "nvml", lambda: None)
    assert _protocol.gpu_identity(0) is None
    monkeypatch.delenv("GPUACCEPT_TEST_INJECT", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    devices = fingerprint._gpus()[0]["devices"]  # the fingerprint names its GPUs the same way
    assert [{k: d[k] for k in ("index", "uuid", "pci_bus_id", "name")} for d in devices] == _bench.preflight(8).gpus


def test_preflight_ignores_own_pid(fake: FakeNVML, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.busy = {0: os.getpid()}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _bench.preflight(1).busy == []


def test_bus_key_spellings() -> None:
    assert _gpu.bus_key("00000000:18:00.0") == _gpu.bus_key("0000:18:00") == _gpu.bus_key("18:00.0") == "0000:18:00"
    assert _gpu.bus_key("00000001:9A:00.0") == "0001:9a:00"


def test_nvlink_error_counters_per_link_only_never_the_legacy_total() -> None:
    """The per-link sum (what nvidia-smi nvlink -e reads) when every active link answered; a counter a
    link did not answer is None naming the link, never the driver's legacy total (0 on Hopper)."""
    from gpuaccept.probes._gpu import nvlink_error_counters
    from gpuaccept.verdicts.nvlink import unread_text

    class Lib:
        NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = 1, 2
        NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = 3, 4
        NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
        NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
        NVML_NVLINK_ERROR_DL_ECC_DATA = 4

        def nvmlDeviceGetFieldValues(self, handle: Any, ids: list[int]) -> list[Any]:
            zero = types.SimpleNamespace(nvmlReturn=0, valueType=3, value=types.SimpleNamespace(ullVal=0))
            return [zero for _ in ids]  # what Hopper's legacy totals answer: success with zero

        def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int) -> int:
            if counter == self.NVML_NVLINK_ERROR_DL_RECOVERY and link == 1:
                raise RuntimeError("not supported on this link")
            return 10 * link + counter

    out = nvlink_error_counters(Lib(), None, [0, 1])
    assert out["crc_data"] == 3 + 13  # every link answered: the per-link sum
    assert out["crc_flit"] == 2 + 12
    assert out["replay"] == 0 + 10
    assert out["ecc_data"] == 4 + 14
    assert out["recovery"] is None  # link 1 did not answer: could not measure, not the legacy 0
    assert out["unread_links"] == {"recovery": [1]}
    assert out["per_link"]["crc_flit"] == {0: 2, 1: 12} and out["per_link"]["recovery"] == {0: 1}
    assert unread_text(out) == "could not read recovery on link(s) 1"
