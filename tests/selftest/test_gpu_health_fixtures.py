"""GPU health and NVLink judging on NVML readings recorded on 2 x H200 SXM 141GB, 2026-11-22 (fixtures/nvml/).

The recorded node passes with the packaged H200 limits; each fault is one edited reading, and the
failure must name the node, the GPU (index and PCI bus) and the metric. The recording is an older one
(``nvml_recordings.older_gpu_health``: a field added since is "not recorded"); that every declared metric with a
limit is judged is said on the current recording, which the GPU machine at hand records again.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.contracts.records import RankRecord
from gpuaccept.dispatch.result import parse_records
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import gpu_health
from gpuaccept.probes.specs import GPU_HEALTH
from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.loader import load_thresholds as _load
from gpuaccept.verdicts.gpu_health import HEALTH_METRICS, decode_reasons, judge_health
from gpuaccept.verdicts.nvlink import judge_affinity, judge_nvlink, judge_topology, pair_matrix

from .ending import ends
from .nvml_recordings import current, older_gpu_health, older_gpu_health_file, older_nvlink

pytestmark = pytest.mark.selftest


@functools.cache
def load_thresholds(site: Path | None = None) -> Thresholds:
    """The packaged thresholds (plus a site file), validated once per module: pydantic takes ~0.5 s."""
    return _load(site)


GPU1 = "1 (00000000:00:07.0)"


@pytest.fixture()
def health() -> dict[str, Any]:
    return older_gpu_health()


@pytest.fixture()
def links() -> dict[str, Any]:
    return older_nvlink()


@pytest.fixture()
def judge() -> Judge:
    return Judge(load_thresholds(), lambda node: "H200", lambda result: None, "selftest")


def test_recorded_h200_is_healthy(health: dict[str, Any], judge: Judge) -> None:
    judge_health(health, judge, "vm", declared_gpus=2)
    judged = {(r.metric, r.subject): r.verdict for r in judge.results}
    assert judged[("gpu_memory_total_gib", GPU1)] == "pass"
    assert judged[("gpu_retired_pages_pending", GPU1)] == "info"  # Hopper: row remapping instead
    assert judged[("gpu_pcie_gen_max", GPU1)] == "pass"


def test_every_health_metric_with_a_limit_is_judged_on_the_recorded_h200(judge: Judge) -> None:
    """What ``test_gpu_health`` declares it judges (``HEALTH_METRICS``) and the H200 sets a limit for is judged,
    on every GPU of the current recording: a metric named there whose judge line is missing fails here, by name."""
    health = json.loads(current("gpu_health").read_text())
    judge_health(
        GPU_HEALTH.read(RankRecord("vm", 0, 1, 0, None, health)), judge, "vm", declared_gpus=len(health["gpus"])
    )
    limited = [m for m in HEALTH_METRICS if m in load_thresholds().limits_for("H200")]
    for gpu in health["gpus"]:
        label = f"{gpu['index']} ({gpu['pci_bus_id']})"
        judged = {r.metric for r in judge.results if r.subject == label and r.verdict in ("pass", "fail")}
        assert not set(limited) - judged, f"declared and limited on the H200, never judged: {set(limited) - judged}"


def test_load_replays_the_dump(capsys: pytest.CaptureFixture[str]) -> None:
    gpu_health.main(["--load", str(older_gpu_health_file())])
    data = parse_records("gpu_health", capsys.readouterr().out, 1, ("vm",))[0].data
    assert data["driver"] == "580.159.04" and [g["index"] for g in data["gpus"]] == [0, 1]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda g: g["remapped_rows"].update(pending=True, uncorrectable=1), "gpu_remapped_rows_pending = 1"),
        (lambda g: g["remapped_rows"].update(failure=True), "gpu_remapped_rows_failed = 1"),
        (lambda g: g.update(ecc_uncorrected_volatile=2), "gpu_ecc_uncorrected_volatile = 2"),
        (lambda g: g.update(ecc_mode_current=0), "gpu_ecc_mode = Disabled"),
        (lambda g: g.update(clock_event_reasons=0x1 | 0x8), "gpu_clock_events_failing = hw_slowdown"),
        (lambda g: g.update(clock_event_reasons=0xC0), "gpu_clock_events_failing = hw_thermal_slowdown+hw_power_brake"),
        (lambda g: g["pcie"].update(gen_max=4), "gpu_pcie_gen_max = 4"),
        (lambda g: g["pcie"].update(width_max=8), "gpu_pcie_width_max = 8"),
        (lambda g: g.update(temperature_c=84), "gpu_temp_margin_c = 5"),
        (lambda g: g.update(power_limit_w=500.0), "gpu_power_limit_w = 500"),
        (lambda g: g.update(memory_total_mib=81559), "gpu_memory_total_gib = 79.65"),
    ],
)
def test_one_fault_fails_naming_gpu_1(health: dict[str, Any], judge: Judge, edit: Any, expected: str) -> None:
    edit(health["gpus"][1])
    with ends(judge, "failed") as caught:
        judge_health(health, judge, "vm", declared_gpus=2)
    assert f"vm GPU {GPU1}: {expected}" in str(caught.value)
    assert {r.subject for r in judge.results if r.verdict == "fail"} == {GPU1}  # GPU 0 failed nothing


def test_sw_power_cap_and_idle_are_only_reported() -> None:
    assert decode_reasons(0x1 | 0x4) == ([], ["gpu_idle", "sw_power_cap"])
    assert decode_reasons(0x1000) == ([], ["other(0x1000)"])


def test_missing_gpu_is_a_failure(health: dict[str, Any], judge: Judge) -> None:
    with ends(judge, "failed", match=r"vm: gpu_count = 2 GPUs \(limit == 8"):
        judge_health(health, judge, "vm", declared_gpus=8)


def test_unreadable_reading_is_an_error(health: dict[str, Any], judge: Judge) -> None:
    health["gpus"][0]["remapped_rows"] = None
    health["gpus"][0]["retired_pages_pending"] = None
    with ends(judge, "error", match=r"GPU 0 \(00000000:00:06.0\): gpu_remapped_rows_pending"):
        judge_health(health, judge, "vm", declared_gpus=2)


def test_busy_gpu_processes_are_reported(health: dict[str, Any], judge: Judge) -> None:
    health["gpus"][1]["processes"] = [{"pid": 1516, "name": "python3", "used_mib": 874.0}]
    judge_health(health, judge, "vm", declared_gpus=2)
    procs = next(r for r in judge.results if r.metric == "gpu_processes" and r.subject == GPU1)
    assert procs.value == 1 and procs.extra["processes"] == ["1516 python3 (874.0 MiB)"]


def test_recorded_nvlink_without_speed_is_an_error(links: dict[str, Any], judge: Judge) -> None:
    """This recording predates the per-link speed reading: driver 580 answers "not supported" for the
    common-speed field, and a speed the SKU sets a limit for that cannot be read never passes."""
    with ends(judge, "error", match=r"nvlink_speed_mbps \(NVML gave no common link speed\)"):
        judge_nvlink(links, judge, "vm")
    values = {(r.metric, r.subject): (r.value, r.verdict) for r in judge.results}
    assert values[("nvlink_links_active", GPU1)] == (18, "pass")
    assert values[("nvlink_crc_errors", GPU1)][1] == "info"  # a count since load has no time base


def test_recorded_nvlink_with_per_link_speed_passes(links: dict[str, Any], judge: Judge) -> None:
    for gpu in links["gpus"]:
        gpu["nvlink"]["speed_mbps_common"] = 26562  # what NVLINK_GET_SPEED / nvidia-smi nvlink -s read
    judge_nvlink(links, judge, "vm")
    values = {(r.metric, r.subject): (r.value, r.verdict) for r in judge.results}
    assert values[("nvlink_speed_mbps", GPU1)] == (26562, "pass")


def test_gpu_count_is_judged_once_per_node(health: dict[str, Any], links: dict[str, Any], judge: Judge) -> None:
    """A GPU fallen off the bus is one finding, test_gpu_health's: the NVLink judge judges the links of the GPUs
    NVML lists and never the count again (issue 50)."""
    health["gpus"].pop()
    links["gpus"].pop()
    links["pairs"] = []
    for gpu in links["gpus"]:
        gpu["nvlink"]["speed_mbps_common"] = 26562
    judge_health(health, judge, "vm", declared_gpus=2)
    judge_nvlink(links, judge, "vm")
    assert [(r.metric, r.verdict) for r in judge.results if r.metric == "gpu_count"] == [("gpu_count", "fail")]


def test_nvlink_with_no_gpu_listed_is_named(judge: Judge) -> None:
    """NVML listing no GPU leaves no link to judge: an ERROR naming that and the test that judges the count,
    never "nothing was judged" and never a pass."""
    with ends(judge, "error", match=r"NVML lists none on vm \(test_gpu_health judges the count"):
        judge_nvlink({"gpus": [], "pairs": [], "nvml": False}, judge, "vm")


def test_slow_link_speed_fails(links: dict[str, Any], judge: Judge) -> None:
    for gpu in links["gpus"]:
        gpu["nvlink"]["speed_mbps_common"] = 26562 if gpu["index"] == 0 else 13281  # one link trained slow
    with ends(judge, "failed", match="nvlink_speed_mbps = 13281"):
        judge_nvlink(links, judge, "vm")


def test_link_down_and_replays_fail(links: dict[str, Any], judge: Judge) -> None:
    gpu = links["gpus"][1]["nvlink"]
    gpu["links"][7]["active"] = False
    gpu["active"] = 17
    gpu["errors"]["replay"] = 3
    with ends(judge, "failed") as caught:
        judge_nvlink(links, judge, "vm")
    assert f"vm GPU {GPU1}: nvlink_links_active = 17 links (limit >= 18" in str(caught.value)
    assert "nvlink_replay_errors = 3" in str(caught.value)


def test_recorded_topology_is_nv18(links: dict[str, Any], judge: Judge) -> None:
    assert judge_topology(links, judge, "vm") == {"gpus": [0, 1], "labels": [["X", "NV18"], ["NV18", "X"]]}


def test_pair_without_nvlink_fails(links: dict[str, Any], judge: Judge) -> None:
    broken = copy.deepcopy(links)
    broken["pairs"][0].update(nvlinks=0, label="PHB", via="PCIe", p2p_nvlink_status="status 2")
    assert pair_matrix(broken)["labels"][0][1] == "PHB"
    with ends(judge, "failed") as caught:
        judge_topology(broken, judge, "vm")
    assert "0 (00000000:00:06.0) <-> 1 (00000000:00:07.0): nvlink_pair_links = 0" in str(caught.value)
    assert "p2p_nvlink_status = status 2" in str(caught.value)


def test_affinity_without_hca_fails_on_an_hgx_sku(links: dict[str, Any], judge: Judge) -> None:
    """The recorded 2 x H200 host has no HCA: an HGX H200 (8 NDR HCAs by the SKU) would have one next to each GPU."""
    with ends(judge, "failed", match="gpu_nic_pcie_distance = no HCA"):
        judge_affinity(links, judge, "vm")
    assert {(r.metric, r.value) for r in judge.results if r.subject == GPU1} >= {
        ("gpu_numa_node", -1),
        ("gpu_nearest_nic", "none"),
    }


def test_affinity_judges_the_nearest_hca(links: dict[str, Any], judge: Judge) -> None:
    links["gpus"][0]["nics"] = [{"name": "mlx5_0", "relation": "PIX"}, {"name": "mlx5_1", "relation": "SYS"}]
    links["gpus"][1]["nics"] = [{"name": "mlx5_0", "relation": "SYS"}, {"name": "mlx5_1", "relation": "SYS"}]
    with ends(judge, "failed") as failed:
        judge_affinity(links, judge, "vm")
    assert f"vm GPU {GPU1}: gpu_nic_pcie_distance = 4" in str(failed.value) and "GPU 0" not in str(failed.value)
