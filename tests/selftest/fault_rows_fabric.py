"""The NVLink fabric state's fault rows (issue 56): each published reading served at the NVML call
(``probes/_inject.fabric_call``: the recorded fields written into the probe's v3 struct) and judged by
``verdicts/nvlink_fabric.py``. Declared here, rendered into docs/faults.md by faults_page.py."""

from __future__ import annotations

from .fault_rows import LOGIC, Row

__all__ = ["NVL_FABRIC", "NVL_FABRIC_ROWS", "NVL_LINKS", "NVL_LINK_ROWS"]

NVL_FABRIC = "NVLink fabric state (NVL72 domains; the published readings served as NVML's fabric call)"
T = "tests/selftest/test_fabric_state.py::"
SERVED = "`fixtures/fabric/{}` served as `nvmlDeviceGetGpuFabricInfoV` (GPUACCEPT_TEST_INJECT `fabric`)"

NVL_FABRIC_ROWS: tuple[Row, ...] = (
    Row(
        NVL_FABRIC,
        "fabric-azure-506",
        "Completed but Insufficient Resources, clique 0, zero cluster UUID (Azure/azhpc-images PR #506)",
        SERVED.format("azure-azhpc-images-506.json"),
        "`nvlink_fabric_state` FAILS on GPU 0: `status Insufficient Resources; cluster UUID 00000000-0000-0000-0000-"
        "000000000000 (zero: in no cluster); ...` on a GB200 node (domain nvl72)",
        LOGIC,
        (T + "test_azure_506_fails_naming_the_gpu",),
    ),
    Row(
        NVL_FABRIC,
        "fabric-dra-626",
        "Completed and Success but Health Summary Unhealthy (kubernetes-sigs/dra-driver-nvidia-gpu #626)",
        SERVED.format("dra-driver-626.json"),
        "`nvlink_fabric_state` FAILS on GPU 0: `health summary Unhealthy; ...`",
        LOGIC,
        (T + "test_dra_626_completed_success_but_unhealthy_fails",),
    ),
    Row(
        NVL_FABRIC,
        "fabric-degraded-mask",
        "bandwidth degraded in the health mask (NVIDIA/nccl #2186's 0xaa, edited to 0xa9: 0xaa decodes healthy)",
        SERVED.format("nccl-2186-mask.json") + ": GPU 0 mask 0xaa, GPU 1 0xa9",
        "GPU 0 passes (0xaa is every NVML health field false); `nvlink_fabric_state` FAILS on GPU 1: "
        "`bandwidth degraded (health mask 0xa9)`",
        LOGIC,
        (T + "test_nccl_2186_mask_0xaa_decodes_healthy_and_a_degraded_mask_fails",),
    ),
    Row(
        NVL_FABRIC,
        "fabric-two-cliques",
        "GPUs of one node in two cliques",
        SERVED.format("gb200-gpud-1106.json") + " with `set: {fabric.gpus.1.cliqueId: 4027}`",
        "`nvlink_fabric_clique` FAILS: `9c6f5af3-...-b66766c413c3/4026: GPUs 0; .../4027: GPUs 1`",
        LOGIC,
        (T + "test_gpus_of_one_node_in_two_cliques_fail",),
    ),
    Row(
        NVL_FABRIC,
        "fabric-placeholder-clique",
        "one clique ID in two clusters (the placeholder 32766 across racks, meta-pytorch/torchcomms #3612)",
        SERVED.format("gb200-gpud-1106.json") + " with both GPUs at clique 32766, GPU 1 in another cluster UUID",
        "`nvlink_fabric_clique` FAILS: two (cluster UUID, clique ID) pairs",
        LOGIC,
        (T + "test_one_clique_id_in_two_clusters_is_two_cliques",),
    ),
    Row(
        NVL_FABRIC,
        "fabric-not-written",
        "NVML returns success and writes nothing (the H200's older call; a zero-filled struct)",
        "a fabric call that writes no field of the primed struct",
        "every field reads `not written by NVML` (left at its sentinel), never clique 0 or a zero UUID; on an "
        "nvl72 node `nvlink_fabric_state` FAILS `state not written by NVML (left at the sentinel)`",
        LOGIC,
        (T + "test_a_call_that_writes_nothing_is_no_reading",),
    ),
    Row(
        NVL_FABRIC,
        "fabric-not-supported",
        "fabric state Not Supported on an NVL SKU (the H200's real reading judged as a GB200)",
        SERVED.format("h200-580.159.04.json"),
        "on HGX (H200): shown (`nvlink_fabric_shown`, info, `cliqueId` left at its sentinel), never judged; as a "
        "GB200 node: `nvlink_fabric_state` FAILS `state Not Supported`",
        LOGIC,
        (T + "test_h200_reading_is_shown_on_hgx_and_never_passes_a_domain",),
    ),
)

NVL_LINKS = "NVLink per-link counters (TELEM07; a published GB200 per-link output served as nvidia-smi)"
L = "tests/selftest/test_nvlink_counters.py::"
SMI = "`fixtures/nvml/gb200-k8s-test-infra-371.nvlink-s.txt` as `nvidia-smi` on `PATH` beside a fake NVML"

NVL_LINK_ROWS: tuple[Row, ...] = (
    Row(
        NVL_LINKS,
        "nvlink-counters-link-down",
        "a GB200 NVLink down (NVIDIA/k8s-test-infra #371's 18-link output, link 5 edited to `<inactive>`)",
        SMI + ", NVML's state of link 5 down",
        "`nvlink_link_counters` FAILS on GPU 0: `17 of 18 links; down: links [5]` (and `nvlink_links_active` = 17)",
        LOGIC,
        (L + "test_a_link_down_fails_naming_it",),
    ),
    Row(
        NVL_LINKS,
        "nvlink-counters-not-given",
        "per-link data counters NVML does not give on two links",
        SMI + " answering NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX `nvmlReturn 3` on links 3 and 11",
        "`nvlink_link_counters` FAILS on GPU 0: `16 of 18 links; counters not given on links [3, 11] (nvmlReturn 3)`",
        LOGIC,
        (L + "test_counters_nvml_does_not_give_fail_naming_the_links_and_the_code",),
    ),
)
