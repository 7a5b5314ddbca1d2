"""GPUDirect readiness on the recorded-shape HGX tree (fixtures/sysfs/hgx-h100-gdr), one fault at a time."""

from __future__ import annotations

import functools
import shutil
import struct
from pathlib import Path

import pytest

from gpuaccept.fabric.gdr import ConfigTooShort, acs_control, acs_flags, bridges_between
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import gdr
from gpuaccept.thresholds.loader import Thresholds, load_thresholds
from gpuaccept.verdicts.fabric import judge_gdr

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "fixtures" / "sysfs" / "hgx-h100-gdr"
PROC = REPO / "fixtures" / "sysfs" / "hgx-h100-gdr.proc"
ACS_CTL = 0x148 + 6


@functools.cache
def thresholds() -> Thresholds:
    return load_thresholds()


def judged(data: dict) -> tuple[list[str], list[str]]:
    limits = Judge(thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")
    judge_gdr(data, limits, "gpu-a01")
    missing = [f"GPU {r.subject}: {r.reason}" for r in limits.results if r.verdict == "unmeasured"]
    return [f"{f.subject}: {f.metric} = {f.value}" for f in limits.failures()], missing


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    shutil.copytree(TREE, tmp_path / "sys", symlinks=True)
    return tmp_path / "sys"


def test_healthy_node_passes() -> None:
    data = gdr.collect(TREE, PROC, cuda=False)
    assert len(data["gpus"]) == 8 and data["nvidia_open_module"] is True and data["cmdline_iommu"][-1] == "iommu=pt"
    first = data["gpus"][0]
    assert first["paths"][0]["hca"] == "mlx5_0" and first["shared_prefix"] == 3
    assert [b["bdf"] for b in first["paths"][0]["bridges"]] == ["0000:16:00.0", "0000:17:00.0", "0000:17:01.0"]
    failures, missing = judged(data)
    assert failures == [] and missing == []


def test_acs_redirect_on_a_switch_port_fails_naming_gpu_hca_and_bridge(tree: Path) -> None:
    config = tree / "bus" / "pci" / "devices" / "0000:99:01.0" / "config"  # GPU 9a's downstream port to mlx5_4
    raw = bytearray(config.read_bytes())
    struct.pack_into("<H", raw, ACS_CTL, 0x001D)  # SrcValid ReqRedir CmpltRedir UpstreamFwd
    config.write_bytes(bytes(raw))
    failures, _ = judged(gdr.collect(tree, PROC, cuda=False))
    assert failures == ["0000:9a:00.0 -> mlx5_4 via bridge 0000:99:01.0: pcie_acs_ctl = 29"]
    assert acs_flags(29) == ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]


def test_iommu_translating_fails(tree: Path) -> None:
    group = (tree / "bus" / "pci" / "devices" / "0000:2a:00.0" / "iommu_group").resolve()
    (group / "type").write_text("DMA-FQ\n")
    failures, _ = judged(gdr.collect(tree, PROC, cuda=False))
    assert failures == ["0000:2a:00.0 -> mlx5_1: iommu_translation = 1"]


def test_peermem_missing_needs_dmabuf(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.rmtree(tree / "module" / "nvidia_peermem")
    data = gdr.collect(tree, PROC, cuda=False)
    _, missing = judged(data)
    assert len(missing) == 8 and "DMA-BUF support unknown" in missing[0]  # never a pass on no data
    data["cuda_dmabuf"] = {"devices": {"0000:18:00": 1, "0000:2a:00": 0}, "error": None}
    failures, missing = judged(data)
    assert "0000:2a:00.0 -> mlx5_1: gdr_kernel_support = 0" in failures
    assert not any(f.startswith("0000:18:00.0") for f in failures)


def test_config_space_read_without_root_is_unreadable(tree: Path) -> None:
    config = tree / "bus" / "pci" / "devices" / "0000:16:00.0" / "config"
    config.write_bytes(config.read_bytes()[:64])
    _, missing = judged(gdr.collect(tree, PROC, cuda=False))
    assert missing == [
        "GPU 0000:18:00.0 -> mlx5_0 via bridge 0000:16:00.0: 64 bytes of config space (extended "
        "capabilities start at 0x100): run as root to read ACS"
    ]


def test_acs_parser_and_path() -> None:
    with pytest.raises(ConfigTooShort):
        acs_control(bytes(64))
    assert acs_control(bytes(4096)) is None  # no extended capability at all
    raw = bytearray(4096)
    struct.pack_into("<I", raw, 0x100, 0x0001 | (0x1 << 16) | (0x180 << 20))
    struct.pack_into("<I", raw, 0x180, 0x000D | (0x1 << 16))
    struct.pack_into("<HH", raw, 0x184, 0x5F, 0x04)
    assert acs_control(bytes(raw)) == 4 and acs_flags(4) == ["ReqRedir"]
    gpu = ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"]
    nic = ["pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0"]
    assert bridges_between(gpu, nic) == ["0000:16:00.0", "0000:17:00.0", "0000:17:01.0"]
    assert bridges_between(
        ["pci0000:15", "0000:15:01.0", "0000:18:00.0"], ["pci0000:9a", "0000:9a:01.0", "0000:9b:00.0"]
    ) == [
        "0000:15:01.0",
        "0000:9a:01.0",
    ]
