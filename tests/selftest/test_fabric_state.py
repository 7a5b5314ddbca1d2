"""NVLink fabric state: the published readings, served as the NVML call (probes/_inject.py), decoded by the probe's
sentinel method (probes/_fabric_state.py) and judged (verdicts/nvlink_fabric.py).

A healthy GB200 (gpud #1106) and GB300 (k8s-test-infra #677's tray) pass; the published false passes (Azure
#506, dra #626) and a degraded mask fail naming the GPU; the H200's real reading (state 0, clique left as the
caller wrote it) is shown on HGX and never passes a domain.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from gpuaccept.contracts.fabric_state import FabricState
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import _fabric_state, _inject
from gpuaccept.results.metrics import MetricResult
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.verdicts.c2c import judge_c2c
from gpuaccept.verdicts.nvlink_fabric import (
    READY,
    degraded_bandwidth,
    domain_for,
    domain_not_judged,
    health_fields,
    judge_fabric,
    node_cliques,
)

from .conftest import repository_view, run_inner
from .nvml_recordings import older_gpu_health_file

FABRIC = Path(__file__).resolve().parents[2] / "fixtures" / "fabric"
THRESHOLDS = load_thresholds()
VALIDATE = TypeAdapter(FabricState)


def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixture: str, **edits: Any) -> FabricState:
    """The probe's reading of a recording served at the NVML call, with ``set`` edits for this node."""
    spec = {"readings": {"fabric": str(FABRIC / fixture)}, "nodes": {"n1": {"set": edits}} if edits else {}}
    path = tmp_path / f"inject-{fixture}-{len(edits)}.json"
    path.write_text(json.dumps(spec))
    monkeypatch.setenv(_inject.ENV, str(path))
    monkeypatch.setenv("GPUACCEPT_NODE", "n1")
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    return VALIDATE.validate_python(_fabric_state.read_fabric(None, []))


def judged(fabric: FabricState, sku: str) -> list[MetricResult]:
    results: list[MetricResult] = []
    judge = Judge(THRESHOLDS, lambda node: sku, results.append, "test_nvlink_fabric")
    judge_fabric(fabric, domain_for(judge, "n1"), judge, "n1", driver="580.95.05")
    return results


def verdicts(results: list[MetricResult]) -> dict[tuple[str, str | None], str]:
    return {(r.metric, r.subject): r.verdict for r in results}


# ---- the probe's decode ---------------------------------------------------------------------------------


def test_the_struct_is_nvmls_v3_and_goes_by_reference() -> None:
    """nvml.h: nvmlGpuFabricInfo_v3 = sizeof | 3 << 24 (nvidia-ml-py's value), so NVML accepts the version."""
    pynvml = pytest.importorskip("pynvml")
    assert _fabric_state.VERSION_V3 == pynvml.nvmlGpuFabricInfo_v3
    assert ctypes.sizeof(_fabric_state.FabricInfoV3) == ctypes.sizeof(pynvml.c_nvmlGpuFabricInfo_v3_t)
    seen: list[Any] = []
    _fabric_state.read_gpu(lambda handle, ref: seen.append(ref), None, 0, None)
    assert type(seen[0]).__name__ == "CArgObject" and seen[0]._obj.version == _fabric_state.VERSION_V3


def test_a_call_that_writes_nothing_is_no_reading() -> None:
    """What the H200 did with the old call: success, every field as the caller wrote it."""
    gpu = _fabric_state.read_gpu(lambda handle, ref: None, None, 0, "GPU-x")
    assert gpu["state"] is gpu["status"] is gpu["health_mask"] is gpu["clique_id"] is gpu["cluster_uuid"] is None
    assert set(gpu["left_at_sentinel"]) == set(_fabric_state.SENTINELS)


def _write_state_byte(state: int) -> Any:
    """An NVML call that writes what the H200's driver wrote (2026-12-02): success, the state's one byte
    (nvmlGpuFabricState_t is an unsigned char), nothing else."""

    def call(handle: Any, ref: Any) -> None:
        offset = _fabric_state.FabricInfoV3.state.offset
        ctypes.memmove(ctypes.addressof(ref._obj) + offset, bytes([state]), 1)

    return call


def test_the_state_is_nvmls_one_byte_not_the_padding_after_it() -> None:
    """On the H200 a four-byte sentinel in ``state`` came back 0xDEADBE00: NVML wrote one byte. Read as nvidia-ml-py
    declares it (c_uint) a GB200's Completed would be 0xDEADBE03 and fail a healthy tray; read as one byte it is 3."""
    h200 = _fabric_state.read_gpu(_write_state_byte(0), None, 0, "GPU-x")
    assert h200["state"] == 0 and "state" not in h200["left_at_sentinel"]
    assert set(h200["left_at_sentinel"]) == set(_fabric_state.SENTINELS) - {"state"}
    assert _fabric_state.read_gpu(_write_state_byte(3), None, 0, "GPU-x")["state"] == 3


def test_clique_and_uuid_are_not_read_before_completed(tmp_path, monkeypatch) -> None:
    fabric = served(tmp_path, monkeypatch, "gb200-gpud-1106.json", **{"fabric.gpus.0.state": "In Progress"})
    gpu = fabric["gpus"][0]
    assert gpu["state"] == 2 and gpu["clique_id"] is None and gpu["cluster_uuid"] is None
    assert "not read before state Completed" in " ".join(gpu["errors"])


def test_an_nvml_error_is_named(tmp_path, monkeypatch) -> None:
    fabric = served(
        tmp_path, monkeypatch, "gb200-gpud-1106.json", **{"fabric.gpus.1.returned": "NVMLError_NotSupported"}
    )
    assert fabric["gpus"][1]["returned"] == "NVMLError_NotSupported"
    assert verdicts(judged(fabric, "GB200"))[("nvlink_fabric_state", "1")] == "fail"


# ---- healthy recordings -----------------------------------------------------------------------------------


def test_gpud_1106_gb200_passes_with_health_a_declared_absence(tmp_path, monkeypatch) -> None:
    fabric = served(tmp_path, monkeypatch, "gb200-gpud-1106.json")
    assert fabric["source"] == "injected" and [g["clique_id"] for g in fabric["gpus"]] == [4026, 4026]
    results = judged(fabric, "GB200")
    assert set(verdicts(results).values()) == {"pass"} and len(results) == 3
    state = next(r for r in results if r.metric == "nvlink_fabric_state")
    assert "not reported by driver 580.95.05 (Not Supported): a declared absence" in state.extra["health_summary"]


def test_gpud_1106_meets_the_gb200_limits() -> None:
    """The recorded node's GPUs are GB200s (gpud: 'NVIDIA-GB200'), which get GB200's own limits, not B200's."""
    assert THRESHOLDS.sku_for_gpu("NVIDIA GB200") == "GB200"
    gb200, b200 = THRESHOLDS.limits_for("GB200"), THRESHOLDS.limits_for("B200")
    assert gb200["hostbw_h2d_gbps"].min != b200["hostbw_h2d_gbps"].min  # NVLink-C2C, not PCIe
    assert "ib_hca_count" not in gb200 and gb200["gpu_power_limit_w"].min == 1200


def test_k8s_test_infra_677_gb300_passes(tmp_path, monkeypatch) -> None:
    fabric = served(tmp_path, monkeypatch, "gb300-k8s-test-infra-677.json")
    gpu = fabric["gpus"][0]
    assert gpu["health_summary"] == 1 and gpu["health_mask"] is not None
    assert health_fields(gpu["health_mask"])["degraded_bandwidth"] == "false"
    assert set(verdicts(judged(fabric, "GB300")).values()) == {"pass"}


# ---- the published faults -----------------------------------------------------------------------------------


def _failed(results: list[MetricResult]) -> dict[str | None, str]:
    return {r.subject: str(r.value) for r in results if r.verdict == "fail"}


def test_azure_506_fails_naming_the_gpu(tmp_path, monkeypatch) -> None:
    results = judged(served(tmp_path, monkeypatch, "azure-azhpc-images-506.json"), "GB200")
    failed = _failed(results)
    assert "status Insufficient Resources" in failed["0"]
    assert [r.verdict for r in results if r.metric == "nvlink_fabric_clique"] == ["fail"]  # a zero UUID: no clique
    assert "cluster UUID 00000000-0000-0000-0000-000000000000 (zero: in no cluster)" in failed["0"]


def test_dra_626_completed_success_but_unhealthy_fails(tmp_path, monkeypatch) -> None:
    failed = _failed(judged(served(tmp_path, monkeypatch, "dra-driver-626.json"), "GB200"))
    assert "health summary Unhealthy" in failed["0"]


def test_nccl_2186_mask_0xaa_decodes_healthy_and_a_degraded_mask_fails(tmp_path, monkeypatch) -> None:
    """NVML's 2-bit fields: 0xaa is every condition false; 0xa9 (the file's edit) is DEGRADED_BW true."""
    assert health_fields(0xAA) == dict.fromkeys(health_fields(0xAA), "false") and not degraded_bandwidth(0xAA)
    failed = _failed(judged(served(tmp_path, monkeypatch, "nccl-2186-mask.json"), "GB200"))
    assert set(failed) == {"1"} and "bandwidth degraded (health mask 0xa9)" in failed["1"]


def test_gpus_of_one_node_in_two_cliques_fail(tmp_path, monkeypatch) -> None:
    fabric = served(tmp_path, monkeypatch, "gb200-gpud-1106.json", **{"fabric.gpus.1.cliqueId": 4027})
    clique = next(r for r in judged(fabric, "GB200") if r.metric == "nvlink_fabric_clique")
    assert clique.verdict == "fail" and "4026: GPUs 0" in str(clique.value) and "4027: GPUs 1" in str(clique.value)


def test_one_clique_id_in_two_clusters_is_two_cliques(tmp_path, monkeypatch) -> None:
    """The placeholder 32766 in unrelated racks (torchcomms #3612): the clique is (cluster UUID, clique ID)."""
    edits = {
        "fabric.gpus.0.cliqueId": 32766,
        "fabric.gpus.1.cliqueId": 32766,
        "fabric.gpus.1.clusterUuid": "00000002-0000-0000-0000-000000000002",
    }
    clique = next(
        r
        for r in judged(served(tmp_path, monkeypatch, "gb200-gpud-1106.json", **edits), "GB200")
        if r.metric == "nvlink_fabric_clique"
    )
    assert clique.verdict == "fail"


# ---- the H200's real reading ----------------------------------------------------------------------------


def test_h200_reading_is_shown_on_hgx_and_never_passes_a_domain(tmp_path, monkeypatch) -> None:
    fabric = served(tmp_path, monkeypatch, "h200-580.159.04.json")
    gpu = fabric["gpus"][0]
    assert gpu["state"] == 0 and gpu["health_mask"] == 0 and "cliqueId" in gpu["left_at_sentinel"]
    shown = judged(fabric, "H200")
    assert [(r.metric, r.verdict) for r in shown] == [("nvlink_fabric_shown", "info")]
    assert "state Not Supported" in str(shown[0].value) and "cliqueId" in str(shown[0].value)
    as_domain = judged(fabric, "GB200")
    assert _failed(as_domain)["0"] == "state Not Supported" and READY not in _failed(as_domain)["0"]


def test_a_nodes_cliques_for_the_block_checks_come_from_completed_gpus_only(tmp_path, monkeypatch) -> None:
    """What test_nvlink_domain hands verdicts/nvlink_block.judge_block_cliques: a healthy tray's one clique, nothing
    from a GPU that is not Completed (the H200's reading, whose clique ID NVML never wrote: unread)."""
    gb200 = served(tmp_path, monkeypatch, "gb200-gpud-1106.json")
    assert node_cliques(gb200) == {(gb200["gpus"][0]["cluster_uuid"], 4026)}
    assert node_cliques(served(tmp_path, monkeypatch, "h200-580.159.04.json")) is None


def test_the_site_overrides_the_skus_domain() -> None:
    judge = Judge(THRESHOLDS, lambda node: node, lambda r: None, "selftest")
    assert domain_for(judge, "GB200", "none") == "none" and domain_for(judge, "H200", "nvl72") == "nvl72"


def test_the_domain_defaults_by_sku() -> None:
    judge = Judge(THRESHOLDS, lambda node: node, lambda r: None, "selftest")
    assert [domain_for(judge, s) for s in ("GB200", "GB300", "B300", "B200", "H200", "cpu")] == [
        "nvl72",
        "nvl72",
        "none",
        "none",
        "none",
        "none",
    ]


# ---- NVLink-C2C --------------------------------------------------------------------------------------------


class _FieldLib:
    """A stand-in for pynvml's field-value call: ``answers`` maps (field, scope) to (nvmlReturn, value)."""

    NVML_FI_DEV_C2C_LINK_COUNT, NVML_FI_DEV_C2C_LINK_GET_STATUS, NVML_FI_DEV_C2C_LINK_GET_MAX_BW = 170, 171, 172

    def __init__(self, answers: dict[tuple[int, int], tuple[int, int]]) -> None:
        self.answers = answers

    def nvmlDeviceGetFieldValues(self, handle: Any, fields: list[Any]) -> list[Any]:
        out = []
        for field in fields:
            key = field if isinstance(field, tuple) else (field, 0)
            ret, value = self.answers.get(key, (3, 0))  # NVML_ERROR_NOT_SUPPORTED
            out.append(type("V", (), {"nvmlReturn": ret, "value": type("U", (), {"uiVal": value})()})())
        return out


def test_c2c_links_are_read_per_link_and_shown() -> None:
    lib = _FieldLib({(170, 0): (0, 2), (171, 0): (0, 1), (171, 1): (0, 1), (172, 0): (0, 45000), (172, 1): (3, 0)})
    gpu = _fabric_state.read_c2c(lib, None, 0)
    assert gpu["link_count"] == 2 and [link["max_bw_mbps"] for link in gpu["links"]] == [45000, None]
    assert gpu["errors"] == ["C2C link 1 max bandwidth: nvmlReturn 3"]
    results: list[MetricResult] = []
    judge_c2c([gpu], Judge(THRESHOLDS, lambda node: "GB200", results.append, "test_c2c_links"), "n1")
    assert [(r.metric, r.verdict) for r in results] == [("c2c_links", "info")]
    assert str(results[0].value) == "2 links, status 1 1, max None, 45000 MB/s"


def test_a_board_without_c2c_says_so() -> None:
    gpu = _fabric_state.read_c2c(_FieldLib({}), None, 3)
    assert gpu["link_count"] is None and gpu["errors"] == ["C2C link count: nvmlReturn 3"]


def test_a_node_without_a_domain_is_skipped_after_showing_its_reading() -> None:
    """The acceptance test ends skipped on HGX, never an ERROR of info-only checks nor a pass on them."""
    assert domain_not_judged("none", "H200") is not None and "shown, not judged" in str(
        domain_not_judged("none", "H200")
    )
    assert domain_not_judged("nvl72", "GB200") is None


# ---- end to end: the acceptance test, the fingerprint probe's subprocess and the plugin -------------------

NVML_H200 = older_gpu_health_file()  # the 2 x H200 recording (older: a field added since is "not recorded")


@pytest.mark.parametrize(
    ("fixture", "verdict", "says"),
    [
        ("gb200-gpud-1106.json", "passed", None),
        ("azure-azhpc-images-506.json", "failed", "GPU 0: nvlink_fabric_state = status Insufficient Resources"),
    ],
)
def test_the_acceptance_test_judges_a_served_reading_end_to_end(tmp_path, fixture, verdict, says) -> None:
    """tests/acceptance/test_nvlink_fabric.py in an inner session (--launcher local): the fingerprint probe runs
    as a subprocess on the injected GB200 node (the recorded H200 GPUs renamed GB200, the fabric served at the
    NVML call), so the probe's decode, the payload and the judge run as on a node."""
    node = socket.gethostname()
    names = {f"gpu_health.gpus.{i}.name": "NVIDIA GB200" for i in (0, 1)}
    spec = {
        "readings": {"gpu_health": str(NVML_H200), "fabric": str(FABRIC / fixture)},
        "nodes": {node: {"set": names}},
    }
    (tmp_path / "inject.json").write_text(json.dumps(spec))
    repo = repository_view(tmp_path / "repo")
    env = {**os.environ, _inject.ENV: str(tmp_path / "inject.json"), "GPUACCEPT_NODE": node}
    run = run_inner(repo, "tests/acceptance/test_nvlink_fabric.py", "-m", "acceptance", "--launcher", "local", env=env)
    assert set(run.verdicts().values()) == {verdict}, run.output[-3000:]
    assert says is None or says in run.output, run.output[-3000:]


def test_an_nvidia_ml_py_without_the_call_is_named_not_a_crash() -> None:
    class OldPynvml:
        """nvidia-ml-py from before nvmlDeviceGetGpuFabricInfoV and the C2C fields."""

        def nvmlDeviceGetFieldValues(self, handle: Any, fields: list[Any]) -> list[Any]:
            raise AssertionError("not reached: the C2C field id is missing first")

    fabric = _fabric_state.read_fabric(OldPynvml(), [(None, 0, "GPU-a")])
    assert fabric["gpus"][0]["returned"] == "NoFabricCallInNvidiaMlPy" and fabric["gpus"][0]["state"] is None
    assert fabric["c2c"][0]["errors"] == ["C2C link count: AttributeError"]
