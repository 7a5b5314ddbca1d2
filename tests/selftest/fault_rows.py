"""The fault catalogue's declarations: one ``Row`` per fault, the single source of docs/faults.md.

Each row says what the fault is, how it is injected, what the run then says, how that is proven
(``END_TO_END``: the real acceptance test through srun on the loopback Slurm cluster; ``GPU_RUN``: a
recorded run on real GPUs cited from docs/measurements.md; ``LOGIC``: the judging code alone) and the
selftests that prove it. Rows whose fault the test seam (gpuaccept/probes/_inject.py) injects carry
the node, the injection and the checks the run must name: test_faults_loopback.py injects exactly
those into one run and asserts them from its run record; faults_page.py writes docs/faults.md from
these rows (``python -m tests.selftest.faults_page``) and test_faults_page.py fails when they differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "END_TO_END",
    "FABRIC",
    "GPU_RUN",
    "HW",
    "LOGIC",
    "LOOPBACK_ROWS",
    "NCCL",
    "NCCL_ENV",
    "NCCL_ROWS",
    "Named",
    "Row",
    "idle_links",
]

END_TO_END, GPU_RUN, LOGIC = "end to end (loopback)", "GPU run", "logic only"
LOOP = "tests/selftest/test_faults_loopback.py::test_fault_is_named"
NCCL_LOOP = "tests/selftest/test_faults_nccl.py::test_fault_is_named"


@dataclass(frozen=True)
class Named:
    """What one test of the injected run must end with: its verdict, category, and the failed checks
    (check name, the record's ``where``) it names. No other check of that test may fail."""

    test: str
    verdict: str = "failed"
    category: str = "hardware fault"
    checks: tuple[tuple[str, str], ...] = ()
    message: str = ""


@dataclass(frozen=True)
class Row:
    section: str
    key: str
    fault: str
    injected: str
    says: str
    proof: str
    selftests: tuple[str, ...]
    node: str | None = None
    inject: dict[str, Any] = field(default_factory=dict)
    named: tuple[Named, ...] = ()
    inject_after: dict[str, Any] = field(default_factory=dict)  # laid over ``inject`` when the window test starts


GPU0, GPU1 = "GPU 0 (00000000:00:06.0)", "GPU 1 (00000000:00:07.0)"
NCCL = "NCCL, training and runs"
FABRIC = "The fabric"
HW = "GPUs, NVLink, InfiniBand and node state (the test seam on a loopback cluster, 6 nodes x 2 declared GPUs)"
XID48 = (
    "[ 9012.345678] NVRM: Xid (PCI:0000:00:07): 48, pid=25314, name=python3, An uncorrectable double bit error "
    "(DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 1."
)
XID79 = "[ 8123.456789] NVRM: Xid (PCI:0000:00:07): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def idle_links(links: Iterable[int]) -> dict[str, dict[str, int]]:
    """The per-link data counters (``NvlinkTelemetry.per_link``) of ``links`` as idle links read them, zero KiB:
    an edit the H200 nvlink recording needs, which predates the read."""
    return {str(k): {"tx_kib": 0, "rx_kib": 0} for k in links}


def _loop(key: str, fault: str, node: str, inject: dict[str, Any], injected: str, says: str, *named: Named) -> Row:
    return Row(HW, key, fault, injected, says, END_TO_END, (f"{LOOP}[{key}]",), node, inject, named)


def _window(key: str, fault: str, node: str, after: dict[str, Any], injected: str, says: str, *named: Named) -> Row:
    """A fault that appears between the IB counter window's two readings (tests/selftest/_inject_after.py)."""
    return Row(FABRIC, key, fault, injected, says, END_TO_END, (f"{LOOP}[{key}]",), node, {}, named, after)


def _gdr(key: str, fault: str, node: str, inject: dict[str, Any], injected: str, says: str, *named: Named) -> Row:
    return Row(FABRIC, key, fault, injected, says, END_TO_END, (f"{LOOP}[{key}]",), node, inject, named)


WINDOW = "test_ib_counter_window"
GDR_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # fixtures/sysfs/hgx-h100-gdr: GPU i behind mlx5_i


LOOPBACK_ROWS: tuple[Row, ...] = (
    _loop(
        "ecc",
        "uncorrectable ECC errors, with their Xid 48",
        "node2",
        {"gpus": {"1": {"ecc_uncorrected_volatile": 2}}, "kernel_log_append": [XID48]},
        "node2 GPU 1: `ecc_uncorrected_volatile` 2 and an Xid 48 (DBE) line for its PCI bus",
        "`test_gpu_health[node2]` FAILED `gpu_ecc_uncorrected_volatile` on node2 GPU 1; `test_xid[node2]` FAILED "
        "`xid_hardware_events` on node2 GPU 1",
        Named("test_gpu_health[node2]", checks=(("gpu_ecc_uncorrected_volatile", f"node2 {GPU1}"),)),
        Named("test_xid[node2]", checks=(("xid_hardware_events", f"node2 {GPU1}"),)),
    ),
    _loop(
        "row-remap-pending",
        "ECC row remap pending (waits for a GPU reset)",
        "node2",
        {"gpus": {"0": {"remapped_rows.pending": True}}},
        "node2 GPU 0: `remapped_rows.pending` true",
        "`test_gpu_health[node2]` FAILED `gpu_remapped_rows_pending` on node2 GPU 0",
        Named("test_gpu_health[node2]", checks=(("gpu_remapped_rows_pending", f"node2 {GPU0}"),)),
    ),
    _loop(
        "nvlink-speed-unreadable",
        "NVLink speed unreadable",
        "node2",
        {"gpus": {"0": {"nvlink.speed_mbps_common": None}}},
        "node2 GPU 0: the common link speed as the driver-580 recording has it (not supported)",
        "`test_nvlink[node2]` ERROR naming node2 GPU 0 `nvlink_speed_mbps`, never a pass",
        Named(
            "test_nvlink[node2]",
            "error",
            "could not measure",
            checks=(("nvlink_speed_mbps", f"node2 {GPU0}"),),
            message=f"node2 {GPU0}: nvlink_speed_mbps",
        ),
    ),
    _loop(
        "ib-port-down",
        "an InfiniBand port down",
        "node2",
        {
            "sysfs": {
                "class/infiniband/mlx5_1/ports/1/state": "1: DOWN",
                "class/infiniband/mlx5_1/ports/1/phys_state": "3: Disabled",
            }
        },
        "node2 sysfs `mlx5_1/ports/1/state` `1: DOWN`, `phys_state` `3: Disabled`",
        "`test_infiniband[node2]` FAILED `ib_port_state`, `ib_port_phys_state` on node2 HCA mlx5_1 port 1",
        Named(
            "test_infiniband[node2]",
            checks=(("ib_port_state", "node2 HCA mlx5_1 port 1"), ("ib_port_phys_state", "node2 HCA mlx5_1 port 1")),
        ),
    ),
    _loop(
        "thermal",
        "a thermal slowdown",
        "node3",
        {"gpus": {"1": {"clock_event_reasons": 0x41}}},
        "node3 GPU 1: clock-event reasons 0x41 (idle + HW thermal slowdown)",
        "`test_gpu_health[node3]` FAILED `gpu_clock_events_failing = hw_thermal_slowdown` on node3 GPU 1",
        Named("test_gpu_health[node3]", checks=(("gpu_clock_events_failing", f"node3 {GPU1}"),)),
    ),
    _loop(
        "nvlink-down",
        "an NVLink down",
        "node3",
        {
            "gpus": {
                "0": {
                    "nvlink.links.5.active": False,
                    "nvlink.active": 17,
                    "nvlink.telemetry.per_link": idle_links(k for k in range(18) if k != 5),
                }
            },
            "set": {"nvlink.pairs.0.nvlinks": 17},
        },
        "node3 GPU 0: link 5 inactive (17 of 18 active, no data counters read on it), the GPU pair NV17",
        "`test_nvlink[node3]` FAILED `nvlink_links_active = 17` and `nvlink_link_counters` (`17 of 18 links; down: "
        "links [5]`) on node3 GPU 0; `test_gpu_topology[node3]` FAILED `nvlink_pair_links` on the pair GPU 0 <-> 1",
        Named(
            "test_nvlink[node3]",
            checks=(("nvlink_links_active", f"node3 {GPU0}"), ("nvlink_link_counters", f"node3 {GPU0}")),
        ),
        Named("test_gpu_topology[node3]", checks=(("nvlink_pair_links", f"node3 {GPU0} <-> 1 (00000000:00:07.0)"),)),
    ),
    _loop(
        "ib-rate",
        "an InfiniBand port at a lower rate",
        "node3",
        {"sysfs": {"class/infiniband/mlx5_3/ports/1/rate": "200 Gb/sec (4X HDR)"}},
        "node3 sysfs `mlx5_3/ports/1/rate` `200 Gb/sec (4X HDR)`",
        "`test_infiniband[node3]` FAILED `ib_port_rate_gbps = 200` on node3 HCA mlx5_3 port 1",
        Named(
            "test_infiniband[node3]",
            category="threshold miss",
            checks=(("ib_port_rate_gbps", "node3 HCA mlx5_3 port 1"),),
        ),
    ),
    _loop(
        "shm-full",
        "a full /dev/shm",
        "node3",
        {"set": {"hygiene.dev_shm_free_gib": 0.02}},
        "node3: /dev/shm free space 0.02 GiB (its size unchanged)",
        "`test_dev_shm_free[node3]` FAILED `dev_shm_free_gib` on node3",
        Named("test_dev_shm_free[node3]", category="threshold miss", checks=(("dev_shm_free_gib", "node3"),)),
    ),
    _loop(
        "power-brake",
        "a hardware power-brake slowdown",
        "node4",
        {"gpus": {"0": {"clock_event_reasons": 0x81}}},
        "node4 GPU 0: clock-event reasons 0x81 (idle + HW power brake)",
        "`test_gpu_health[node4]` FAILED `gpu_clock_events_failing = hw_power_brake_slowdown` on node4 GPU 0",
        Named("test_gpu_health[node4]", checks=(("gpu_clock_events_failing", f"node4 {GPU0}"),)),
    ),
    _loop(
        "power-cap",
        "a low power cap",
        "node4",
        {"gpus": {"1": {"power_limit_w": 500.0}}},
        "node4 GPU 1: enforced power limit 500 W (default 700)",
        "`test_gpu_health[node4]` FAILED `gpu_power_limit_w = 500` on node4 GPU 1",
        Named("test_gpu_health[node4]", checks=(("gpu_power_limit_w", f"node4 {GPU1}"),)),
    ),
    _loop(
        "nvlink-replay",
        "NVLink replay errors",
        "node4",
        {"gpus": {"1": {"nvlink.errors.replay": 7}}},
        "node4 GPU 1: NVLink replay counter 7",
        "`test_nvlink[node4]` FAILED `nvlink_replay_errors = 7` on node4 GPU 1",
        Named("test_nvlink[node4]", checks=(("nvlink_replay_errors", f"node4 {GPU1}"),)),
    ),
    _loop(
        "ib-symbol-errors",
        "InfiniBand symbol errors",
        "node4",
        {"sysfs": {"class/infiniband/mlx5_2/ports/1/counters/symbol_error": "50"}},
        "node4 sysfs `mlx5_2/ports/1/counters/symbol_error` 50",
        "`test_infiniband[node4]` FAILED `ib_symbol_errors = 50` on node4 HCA mlx5_2 port 1",
        Named("test_infiniband[node4]", checks=(("ib_symbol_errors", "node4 HCA mlx5_2 port 1"),)),
    ),
    _loop(
        "driver-drift",
        "one node's driver differs",
        "node4",
        {"set": {"gpu_health.driver": "570.124.06"}},
        "node4: NVML driver version 570.124.06 (the others 580.159.04)",
        "`test_versions_consistent` FAILED `versions_consistent` on node4 (driver), category drift; the other "
        "nodes pass",
        Named("test_versions_consistent", category="drift", checks=(("versions_consistent", "node4 field driver"),)),
    ),
    _loop(
        "pcie-gen4",
        "a PCIe link trained at Gen4",
        "node5",
        {"gpus": {"0": {"pcie.gen_max": 4, "pcie.gen_current": 4}}},
        "node5 GPU 0: PCIe maximum generation 4",
        "`test_gpu_health[node5]` FAILED `gpu_pcie_gen_max = 4` on node5 GPU 0",
        Named("test_gpu_health[node5]", category="threshold miss", checks=(("gpu_pcie_gen_max", f"node5 {GPU0}"),)),
    ),
    _loop(
        "pcie-x8",
        "a PCIe link trained at x8",
        "node5",
        {"gpus": {"1": {"pcie.width_max": 8, "pcie.width_current": 8}}},
        "node5 GPU 1: PCIe maximum width 8",
        "`test_gpu_health[node5]` FAILED `gpu_pcie_width_max = 8` on node5 GPU 1",
        Named("test_gpu_health[node5]", category="threshold miss", checks=(("gpu_pcie_width_max", f"node5 {GPU1}"),)),
    ),
    _loop(
        "nvlink-slow",
        "an NVLink trained slow",
        "node5",
        {"gpus": {"1": {"nvlink.speed_mbps_common": 13281}}},
        "node5 GPU 1: common link speed 13281 MB/s (half of 26562)",
        "`test_nvlink[node5]` FAILED `nvlink_speed_mbps = 13281` on node5 GPU 1",
        Named("test_nvlink[node5]", checks=(("nvlink_speed_mbps", f"node5 {GPU1}"),)),
    ),
    _loop(
        "far-hca",
        "a GPU far from its HCA",
        "node5",
        {"gpus": {"0": {"nics": [{"name": "mlx5_0", "relation": "SYS"}]}}},
        "node5 GPU 0: its only HCA across the CPU interconnect (SYS)",
        "`test_gpu_nic_affinity[node5]` FAILED `gpu_nic_pcie_distance = 4` on node5 GPU 0",
        Named(
            "test_gpu_nic_affinity[node5]",
            category="threshold miss",
            checks=(("gpu_nic_pcie_distance", f"node5 {GPU0}"),),
        ),
    ),
    _loop(
        "hca-missing",
        "an HCA missing",
        "node5",
        {"sysfs": {"class/infiniband/mlx5_7": None}},
        "node5 sysfs: `class/infiniband/mlx5_7` gone (7 compute HCAs)",
        "`test_infiniband[node5]` FAILED `ib_hca_count = 7` on node5",
        Named("test_infiniband[node5]", category="threshold miss", checks=(("ib_hca_count", "node5"),)),
    ),
    _loop(
        "shm-small",
        "a small /dev/shm (Docker's 64 MB default)",
        "node5",
        {"set": {"hygiene.dev_shm_gib": 0.0625, "hygiene.dev_shm_free_gib": 0.0625}},
        "node5: /dev/shm of 0.0625 GiB, all free",
        "`test_node_limits[node5]` FAILED `dev_shm_gib`; `test_dev_shm_free[node5]` FAILED `dev_shm_free_gib`",
        Named("test_node_limits[node5]", category="threshold miss", checks=(("dev_shm_gib", "node5"),)),
        Named("test_dev_shm_free[node5]", category="threshold miss", checks=(("dev_shm_free_gib", "node5"),)),
    ),
    _loop(
        "fallen-off-the-bus",
        "a GPU fallen off the bus (in gres, gone from NVML), with its Xid 79",
        "node6",
        {"remove_gpus": [1], "kernel_log_append": [XID79]},
        "node6: GPU 1 removed from every NVML reading (Slurm still declares 2), an Xid 79 line for its PCI bus",
        "`test_gpu_health[node6]` FAILED `gpu_count = 1 GPUs (limit == 2)` (category hardware fault; the one "
        "check of the count: `test_fingerprint` and `test_nvlink` do not judge it again); "
        "`test_xid[node6]` FAILED `xid_hardware_events` on device 0000:00:07; "
        "`test_gpu_topology[node6]` ERROR `no GPU pair to judge: NVML lists 1 GPU(s) on node6`; "
        "GPU 0 passes every check",
        Named("test_gpu_health[node6]", checks=(("gpu_count", "node6"),)),
        Named("test_xid[node6]", checks=(("xid_hardware_events", "node6 GPU unknown device 0000:00:07"),)),
        Named(
            "test_gpu_topology[node6]",
            "error",
            "could not measure",
            checks=(("nvlink_pair_links", "node6"),),
            message="no GPU pair to judge: NVML lists 1 GPU",
        ),
    ),
    _loop(
        "clock-skew",
        "a node whose clock is skewed",
        "node6",
        {"clock_offset_s": 600},
        "node6: wall clock 600 s ahead (what `faketime` would do, inside the hygiene probe)",
        "`test_node_clocks` FAILED `node_clock_offset_s` about 600 on node6; the other nodes pass",
        Named("test_node_clocks", category="threshold miss", checks=(("node_clock_offset_s", "node6"),)),
    ),
    # ---- the fabric: GPUDirect readiness (fixtures/sysfs/hgx-h100-gdr, 8 GPUs each behind a switch) ----------
    _gdr(
        "gdr-off",
        "GPUDirect RDMA off (no nvidia_peermem, no DMA-BUF)",
        "node2",
        {
            "gdr_sysfs": {"module/nvidia_peermem": None},
            "set": {"gdr.cuda_dmabuf": {"devices": {f"0000:{b}:00": 0 for b in GDR_BUSES}, "error": None}},
        },
        "node2: `module/nvidia_peermem` gone from its sysfs, CUDA answering DMA-BUF unsupported on every GPU",
        "`test_gdr_enablement[node2]` FAILED `gdr_kernel_support = 0` on each GPU -> HCA path of node2",
        Named(
            "test_gdr_enablement[node2]",
            category="threshold miss",
            checks=tuple(
                ("gdr_kernel_support", f"node2 GPU 0000:{b}:00.0 -> mlx5_{i}") for i, b in enumerate(GDR_BUSES)
            ),
        ),
    ),
    _gdr(
        "acs",
        "ACS redirect on a PCIe switch port",
        "node3",
        {"gdr_sysfs": {"bus/pci/devices/0000:99:01.0/config": {"at": 0x148 + 6, "hex": "1d00"}}},
        "node3: ACS Control 0x001d (SrcValid ReqRedir CmpltRedir UpstreamFwd) in the config space of the "
        "downstream port between GPU 9a and mlx5_4",
        "`test_gdr_enablement[node3]` FAILED `pcie_acs_ctl = 29` on `0000:9a:00.0 -> mlx5_4 via bridge 0000:99:01.0`",
        Named(
            "test_gdr_enablement[node3]",
            category="threshold miss",
            checks=(("pcie_acs_ctl", "node3 GPU 0000:9a:00.0 -> mlx5_4 via bridge 0000:99:01.0"),),
        ),
    ),
    _gdr(
        "iommu",
        "IOMMU translating (DMA / DMA-FQ)",
        "node4",
        {"gdr_sysfs": {"bus/pci/devices/0000:2a:00.0/iommu_group/type": "DMA-FQ"}},
        "node4: GPU 2a's IOMMU group of type `DMA-FQ`",
        "`test_gdr_enablement[node4]` FAILED `iommu_translation = 1` on `0000:2a:00.0 -> mlx5_1`",
        Named(
            "test_gdr_enablement[node4]",
            category="threshold miss",
            checks=(("iommu_translation", "node4 GPU 0000:2a:00.0 -> mlx5_1"),),
        ),
    ),
    _gdr(
        "acs-unreadable",
        "ACS unreadable (suite not run as root)",
        "node5",
        {"gdr_sysfs": {"bus/pci/devices/0000:16:00.0/config": {"truncate": 64}}},
        "node5: the bridge's config space cut to the 64 bytes a non-root read gets",
        "`test_gdr_enablement[node5]` ERROR `GPU 0000:18:00.0 -> mlx5_0 via bridge 0000:16:00.0: 64 bytes of "
        "config space ...: run as root to read ACS`",
        Named(
            "test_gdr_enablement[node5]",
            "error",
            "could not measure",
            message="run as root to read ACS",
            checks=(("pcie_acs_ctl", "node5 GPU 0000:18:00.0 -> mlx5_0 via bridge 0000:16:00.0"),),
        ),
    ),
    # ---- the fabric: IB counters between the window's two readings ------------------------------------------
    _window(
        "link-flap",
        "link flap during the run",
        "node5",
        {"sysfs": {"class/infiniband/mlx5_5/ports/1/counters/link_downed": "2"}},
        "node5: `mlx5_5` `link_downed` 1 at the first reading, 2 when `test_ib_counter_window` starts",
        "`test_ib_counter_window` FAILED `ib_window_link_downed = 1` on node5 HCA mlx5_5 port 1; every other "
        "port of every node passes",
        Named(WINDOW, category="threshold miss", checks=(("ib_window_link_downed", "node5 HCA mlx5_5 port 1"),)),
    ),
    _window(
        "symbol-rate",
        "symbol errors under load",
        "node6",
        {
            "sysfs": {
                "class/infiniband/mlx5_0/ports/1/counters/symbol_error": "5",
                "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data": str(55341209 + 10**10),
            }
        },
        "node6: `mlx5_0` 5 symbol errors while 10^10 words (3.2e11 bits) arrived in the window",
        "`test_ib_counter_window` FAILED `ib_window_symbol_error_rate = 1.5625e-11` (limit 1e-12) on node6 HCA "
        "mlx5_0 port 1",
        Named(WINDOW, category="threshold miss", checks=(("ib_window_symbol_error_rate", "node6 HCA mlx5_0 port 1"),)),
    ),
    _window(
        "counter-reset",
        "a counter reset during the window",
        "node4",
        {"sysfs": {"class/infiniband/mlx5_0/ports/1/counters/port_rcv_data": "1000"}},
        "node4: `mlx5_0` `port_rcv_data` lower at the second reading than at the first",
        "`test_ib_counter_window` FAILED (the other rows' faults), listing under `readings could not be taken` "
        "`node4 HCA mlx5_0 port 1: ib_window_symbol_error_rate (counters/port_rcv_data went down (reset during "
        "the window))` and the same for `ib_window_rcv_error_rate` (a counter saturated at 255 reads the same "
        "way: judging code only, tests/selftest/test_fabric_counters.py)",
        Named(
            WINDOW,
            category="threshold miss",
            message="port_rcv_data went down (reset during the window)",
            checks=(
                ("ib_window_symbol_error_rate", "node4 HCA mlx5_0 port 1"),
                ("ib_window_rcv_error_rate", "node4 HCA mlx5_0 port 1"),
            ),
        ),
    ),
)

#: Faults of the NCCL probe's selftest-only knobs (refused without GPUACCEPT_SELFTEST=1), node-qualified so
#: one node of a fan-out step carries them: test_faults_nccl.py runs test_nccl_node and
#: test_nccl_node_at_fault on 4 loopback CPU nodes (2 gloo ranks per node) with these in the environment.
NCCL_ENV = {
    "GPUACCEPT_FAULT_CORRUPT_RANK": "node3:0",
    "GPUACCEPT_FAULT_HANG_RANK": "node2:1",
    "GPUACCEPT_FAULT_SLOW_NODE": "node4",
    "GPUACCEPT_FAULT_SLOW_S": "0.05",  # before every launch: 30x a 1 MiB gloo all_reduce here (1.7 ms)
    "GPUACCEPT_FAULT_RANK_EXIT": "2:3",  # the fine-tune's rank 2 (node2's first) exits at step 3
}
NCCL_ROWS: tuple[Row, ...] = (
    Row(
        NCCL,
        "wrong-result",
        "wrong collective results",
        "`GPUACCEPT_FAULT_CORRUPT_RANK=node3:0`: the probe adds 1 to one element of node3's rank 0 result, in "
        "every step node3 takes part in",
        "`test_nccl_node[node3]` FAILED `nccl_wrong_elements` on node3 rank 0, `WRONG RESULT all_reduce 64 KiB on "
        "rank 0 (node3)`; `test_nccl_node_at_fault[node3]` FAILED `nccl_node_verdict = at fault` (its pairs with "
        "good nodes fail); node1 and node2 (past its hang) `not at fault`",
        END_TO_END,
        (f"{NCCL_LOOP}[wrong-result]",),
        "node3",
        {},
        (
            Named(
                "test_nccl_node[node3]",
                checks=(("nccl_wrong_elements", "node3 rank 0"),),
                message="WRONG RESULT all_reduce 64 KiB on rank 0 (node3)",
            ),
            Named(
                "test_nccl_node_at_fault[node3]", category="threshold miss", checks=(("nccl_node_verdict", "node3"),)
            ),
        ),
    ),
    Row(
        NCCL,
        "slow-node",
        "one slow node among many",
        "`GPUACCEPT_FAULT_SLOW_NODE=node4`: node4's ranks sleep 0.05 s before every collective launch, in every "
        "step (the groups of 2 and of 4 nodes, and its pairs), beside node3's wrong results",
        "`test_nccl_node[node4]` FAILED its busbw floors; `test_nccl_node_at_fault[node4]` FAILED `nccl_node_verdict "
        "= at fault` (paired with known-good node1 or node2 it still fails); node1 and node2 `not at fault`",
        END_TO_END,
        (f"{NCCL_LOOP}[slow-node]",),
        "node4",
        {},
        (
            Named(
                "test_nccl_node[node4]",
                category="threshold miss",
                checks=tuple(
                    (f"nccl_{c}_busbw_gbs", "node4") for c in ("all_reduce", "all_gather", "alltoall", "broadcast")
                ),
            ),
            Named(
                "test_nccl_node_at_fault[node4]", category="threshold miss", checks=(("nccl_node_verdict", "node4"),)
            ),
        ),
    ),
    Row(
        FABRIC,
        "perftest-missing",
        "perftest not installed",
        "nothing: the loopback host has no `ib_write_bw`, "
        "while every node shows the recorded NDR HCAs (the seam's sysfs tree alone)",
        "`test_rdma_perftest` ERROR `perftest cannot run: node1: ib_write_bw, ib_write_lat not found (install "
        "perftest on every node ...)`, every node named",
        END_TO_END,
        (f"{NCCL_LOOP}[perftest-missing]",),
        None,
        {},
        (
            Named(
                "test_rdma_perftest",
                "error",
                "could not measure",
                message="perftest cannot run: node1: ib_write_bw, ib_write_lat not found",
            ),
        ),
    ),
    Row(
        NCCL,
        "rank-dies",
        "a training rank dies",
        "`GPUACCEPT_FAULT_RANK_EXIT=2:3`: rank 2 of the multi-node fine-tune (node2's first of 2 gloo ranks per "
        "node) exits with status 17 at step 3",
        "the launch ends in seconds (not at the gloo timeout): `test_finetune_multinode[default-ddp]` and "
        "`[default-fsdp]` (one launch) ERROR `... rank 2 on node2 exits with status 17 at step 3`, the survivors "
        "`a collective lost its peer (another rank died?)`",
        END_TO_END,
        (f"{NCCL_LOOP}[rank-dies]", "tests/selftest/test_training_faults.py::test_dead_rank_ends_step_quickly"),
        "node2",
        {},
        tuple(
            Named(
                f"test_finetune_multinode[{s}]",
                "error",
                "could not measure",
                message="rank 2 on node2 exits with status 17 at step 3",
            )
            for s in ("default-ddp", "default-fsdp")
        ),
    ),
    Row(
        NCCL,
        "nccl-hang",
        "an NCCL hang on one rank",
        "`GPUACCEPT_FAULT_HANG_RANK=node2:1`: node2's rank 1 never launches its first collective (node2's own "
        "2-rank step only: in the 1-rank-per-node steps across nodes there is no local rank 1)",
        "`test_nccl_node[node2]` ERROR `exit status 124 ... did not finish within 10 s; behind: rank 1 (node2)`; "
        "the other nodes' cases of the same fan-out step pass",
        END_TO_END,
        (f"{NCCL_LOOP}[nccl-hang]",),
        "node2",
        {},
        (Named("test_nccl_node[node2]", "error", "could not measure", message="behind: rank 1 (node2)"),),
    ),
)
