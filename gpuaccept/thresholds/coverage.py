"""Which acceptance test judges which metric on which node shape: the one place that says so.

A SKU is covered when, on every node shape its users have, each test that would run finds a limit for
every metric it judges (or the catalogue calls the metric informational), and each test about a thing
the SKU declares absent (NVLink on a PCIe card, InfiniBand on a node without HCAs) skips naming that
absence instead of erroring "no limit". ``TESTS`` is the declaration; ``coverage`` computes, for a SKU
and a shape, what runs, what skips and why, and which limits are missing. The selftest
``tests/selftest/test_sku_coverage.py`` holds the declaration to the tests themselves (the metric names
in ``tests/acceptance/*.py`` and the modules they import) and to run records (``fixtures/runs/``), so a
test that starts judging a new metric, or stops, fails it.

The skip rule the tests use for a declared absence is ``declares_absent`` below, imported by them, so
the coverage and the tests cannot disagree about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpuaccept.thresholds.loader import Thresholds
from gpuaccept.thresholds.schema import Limit

__all__ = [
    "ABSENCE_METRIC",
    "NETWORK_METRICS",
    "SHAPES",
    "TESTS",
    "Coverage",
    "Shape",
    "TestSpec",
    "coverage",
    "declares_absent",
]

Feature = Literal["nvlink", "ib", "nccl_net"]

#: the limit whose absence (or ``equal: 0``) declares a feature absent on a SKU or site
ABSENCE_METRIC: dict[Feature, str] = {
    "nvlink": "nvlink_links_active",
    "ib": "ib_hca_count",
    "nccl_net": "nccl_net_transport",
}


def declares_absent(limit: Limit | None) -> bool:
    """Whether a SKU's limit declares the thing absent: no limit at all, or one that admits only zero
    (``equal: 0``, ``max: 0``). A test about that thing skips naming the absence, never errors on it."""
    if limit is None:
        return True
    if limit.equal is not None:
        return str(limit.equal) in ("0", "0.0")
    return limit.max is not None and limit.max <= 0 and not limit.min


@dataclass(frozen=True)
class Shape:
    """A node layout users run: GPUs per node, NVLink/NVSwitch or PCIe only, InfiniBand or not, nodes."""

    gpus: int
    nvlink: bool
    ib: bool
    nodes: int

    @property
    def label(self) -> str:
        gpus = f"{self.gpus} GPU" if self.gpus else "CPU"
        link = "NVLink" if self.nvlink else ("PCIe" if self.gpus else "-")
        nodes = f"{self.nodes} node" + ("s" if self.nodes > 1 else "")
        return f"{nodes} x {gpus}, {link}, {'IB' if self.ib else 'no IB'}"


@dataclass(frozen=True)
class TestSpec:
    """One acceptance test: the metrics it judges (``judge.check``), and when it runs.

    ``gpus``: "any" runs on CPU nodes too; "gpu" needs a GPU; "pair" needs two GPUs on the node;
    "collective" needs two ranks on the node (two GPUs, or two gloo ranks on a CPU node). ``nodes``: the
    allocation it needs. ``absent``: the feature whose declared absence (and absence on the node)
    skips it. ``optional``: runs only when asked for or when a tool is installed (still covered).
    """

    __test__ = False  # a declaration, not a pytest test class

    metrics: tuple[str, ...]
    gpus: Literal["any", "gpu", "pair", "collective"] = "any"
    nodes: int = 1
    absent: Feature | None = None
    optional: str | None = None
    scaled: bool = False  # looked up as metric@N first (N = ranks on the node, or nodes)


_HEALTH = (
    "gpu_memory_total_gib",
    "gpu_ecc_mode",
    "gpu_ecc_uncorrected_volatile",
    "gpu_remapped_rows_pending",
    "gpu_remapped_rows_failed",
    "gpu_clock_events_failing",
    "gpu_pcie_gen_max",
    "gpu_pcie_width_max",
    "gpu_temp_margin_c",
    "gpu_power_limit_w",
)
_IB_PORT = (
    "ib_port_state",
    "ib_port_phys_state",
    "ib_symbol_errors",
    "ib_link_error_recovery",
    "ib_link_downed",
    "ib_port_rcv_errors",
    "ib_port_rcv_remote_physical_errors",
    "ib_port_rcv_switch_relay_errors",
    "ib_port_xmit_discards",
    "ib_port_xmit_constraint_errors",
    "ib_port_rcv_constraint_errors",
    "ib_local_link_integrity_errors",
    "ib_excessive_buffer_overrun_errors",
    "ib_vl15_dropped",
)
_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
_TRAIN = (
    "train_nonfinite_steps",
    "train_loss_final",
    "train_eval_loss",
    "train_steps_to_target",
    "train_loss_rebound",
    "train_wall_s",
)
_TRAIN_LIFECYCLE = ("train_original_kept", "train_reload_eval_delta", "train_ppl_reduction_pct")

#: test id (file::function) -> what it judges and when it runs
TESTS: dict[str, TestSpec] = {
    "test_compute.py::test_matmul": TestSpec(("matmul_bf16_tflops", "matmul_checksum"), gpus="gpu"),
    "test_compute.py::test_burn_in": TestSpec(
        (
            "burnin_tflops",
            "burnin_tflops_drop_pct",
            "burnin_clock_events_failing",
            "burnin_checksum_stable",
            "burnin_checksum",
        ),
        gpus="gpu",
        optional="--burn-in SECONDS",
    ),
    "test_environment.py::test_fingerprint": TestSpec(()),
    "test_environment.py::test_versions_consistent": TestSpec((), nodes=2),
    "test_fabric.py::test_gdr_enablement": TestSpec(
        ("gdr_kernel_support", "pcie_acs_ctl", "iommu_translation"), gpus="gpu", absent="ib"
    ),
    "test_fabric.py::test_nccl_transport": TestSpec(
        ("nccl_net_transport", "nccl_net_gdr", "nccl_net_hca_affinity", "nccl_net_hca_used"),
        gpus="gpu",
        nodes=2,
        absent="nccl_net",
    ),
    "test_fabric.py::test_nccl_rails": TestSpec(
        (*tuple(f"nccl_rail_{c}_busbw_gbs" for c in _COLLECTIVES[:3]), "nccl_busbw_fabric_pct", "nccl_wrong_elements"),
        nodes=2,
    ),
    "test_fabric.py::test_rdma_perftest": TestSpec(
        ("rdma_write_bw_gbps", "rdma_write_bw_pct_of_rate", "rdma_write_lat_p99_us", "rdma_gpu_memory"),
        nodes=2,
        absent="ib",
    ),
    "test_fabric.py::test_ib_counter_window": TestSpec(
        (
            "ib_window_link_downed",
            "ib_window_link_error_recovery",
            "ib_window_symbol_error_rate",
            "ib_window_rcv_error_rate",
        ),
        nodes=2,
        absent="ib",
    ),
    "test_gpu_health.py::test_gpu_health": TestSpec(_HEALTH, gpus="gpu"),
    "test_gpu_health.py::test_xid": TestSpec(("xid_hardware_events", "xid_hardware_codes"), gpus="gpu"),
    "test_hygiene.py::test_node_limits": TestSpec(("dev_shm_gib", "nofile", "memlock_kib")),
    "test_node_state.py::test_dev_shm_free": TestSpec(("dev_shm_free_gib",)),
    "test_node_state.py::test_node_clocks": TestSpec(("node_clock_offset_s",)),
    "test_interconnect.py::test_nvlink": TestSpec(
        ("nvlink_links_active", "nvlink_speed_mbps", "nvlink_replay_errors", "nvlink_recovery_errors"),
        gpus="gpu",
        absent="nvlink",
    ),
    "test_interconnect.py::test_nvlink_errors_under_load": TestSpec(
        ("p2p_nvlink_crc_flit_per_s", "p2p_nvlink_replay_errors", "p2p_nvlink_recovery_errors"),
        gpus="pair",
        absent="nvlink",
    ),
    "test_interconnect.py::test_gpu_topology": TestSpec(
        ("nvlink_pair_links", "p2p_nvlink_status"), gpus="pair", absent="nvlink"
    ),
    "test_interconnect.py::test_gpu_nic_affinity": TestSpec(("gpu_nic_pcie_distance",), gpus="gpu", absent="ib"),
    "test_interconnect.py::test_infiniband": TestSpec(("ib_hca_count", *_IB_PORT), absent="ib"),
    "test_memory.py::test_membw": TestSpec(("membw_tbps",), gpus="gpu"),
    "test_memory.py::test_hostbw": TestSpec(
        ("hostbw_h2d_gbps", "hostbw_d2h_gbps", "pcie_gen_loaded", "pcie_width_loaded"), gpus="gpu"
    ),
    "test_memory.py::test_p2p": TestSpec(("p2p_gbps",), gpus="pair"),
    "test_nccl.py::test_nccl_node": TestSpec(
        (*tuple(f"nccl_{c}_busbw_gbs" for c in _COLLECTIVES), "nccl_wrong_elements"), gpus="collective", scaled=True
    ),
    "test_nccl.py::test_nccl_tests_fidelity": TestSpec(
        ("nccl_fidelity_pct",), gpus="pair", optional="nccl-tests installed"
    ),
    "test_nccl.py::test_nccl_scale": TestSpec(
        (*tuple(f"nccl_{c}_busbw_multinode_gbs" for c in _COLLECTIVES), "nccl_scaling_efficiency_pct"),
        nodes=2,
        scaled=True,
    ),
    "test_nccl.py::test_nccl_node_at_fault": TestSpec(
        tuple(f"nccl_{c}_busbw_multinode_gbs" for c in _COLLECTIVES[:3]), nodes=2, scaled=True
    ),
    "test_slurm.py::test_controller_answers": TestSpec(()),
    "test_slurm.py::test_partition_up": TestSpec(()),
    "test_slurm.py::test_node_usable": TestSpec(()),
    "test_slurm.py::test_step_runs": TestSpec(()),
    "test_slurm.py::test_gpu_isolation": TestSpec(
        ("gpu_foreign_devices_openable", "task_cpu_overlap_pairs"), gpus="gpu"
    ),
    "test_storage.py::test_shared_filesystem": TestSpec((), nodes=2),
    "test_training.py::test_finetune_each_gpu": TestSpec(
        (*_TRAIN, "train_tokens_per_s_per_gpu_solo", "train_gpu_util_pct")
    ),
    "test_training.py::test_finetune_node": TestSpec(
        _TRAIN
        + _TRAIN_LIFECYCLE
        + (
            "train_tokens_per_s_per_gpu_ddp_node",
            "train_tokens_per_s_per_gpu_fsdp_node",
            "train_replica_mismatch_ranks",
            "train_fsdp_shard_ratio",
            "train_fsdp_mem_saving_ratio",
            "train_gpu_util_pct",
        ),
        gpus="collective",
    ),
    # judged when another GPU of the same SKU and stack, or the --baseline run, has this GPU's curve;
    # alone and without a baseline it skips "not applicable"
    "test_training.py::test_finetune_agreement": TestSpec(
        ("train_trajectory_rel_diff", "train_trajectory_baseline_rel_diff")
    ),
    "test_training.py::test_finetune_multinode": TestSpec(
        _TRAIN
        + _TRAIN_LIFECYCLE
        + (
            "train_tokens_per_s_per_gpu_ddp_multinode",
            "train_tokens_per_s_per_gpu_fsdp_multinode",
            "train_replica_mismatch_ranks",
            "train_fsdp_shard_ratio",
            "train_fsdp_mem_saving_ratio",
            "train_gpu_util_pct",
        ),
        nodes=2,
    ),
}

#: busbw floors of the network between nodes: a property of the compute fabric, which a SKU knows only
#: when its reference design has one (``nccl_net_transport`` declared: HGX boards with 8 x NDR 400). A SKU
#: without one (L40S) leaves them to the site file that declares its network (as
#: fixtures/site/lent-h200-socket-net.yaml does) or to ``gpuaccept-calibrate``; until then the tests
#: ERROR naming each of them.
NETWORK_METRICS = frozenset(
    [f"nccl_rail_{c}_busbw_gbs" for c in _COLLECTIVES[:3]] + [f"nccl_{c}_busbw_multinode_gbs" for c in _COLLECTIVES]
)

#: metrics a test judges only on GPU nodes (on a CPU node the gloo ranks have no GPU to watch)
GPU_ONLY = frozenset({"train_gpu_util_pct", "train_fsdp_mem_saving_ratio"})


def _shapes(gpus: tuple[int, ...], nvlink_at: int | None, ib: tuple[bool, ...]) -> tuple[Shape, ...]:
    return tuple(Shape(g, nvlink_at is not None and g >= nvlink_at, i, n) for g in gpus for i in ib for n in (1, 2))


#: SKU -> the shapes its users run (the selftest judges coverage on each). HGX boards: one GPU passed to a
#: VM has no NVSwitch fabric (PCIe only), eight share it. L40S is a PCIe card whose reference servers
#: carry no InfiniBand compute fabric: a site with one declares its floors (see docs/thresholds.md).
SHAPES: dict[str, tuple[Shape, ...]] = {
    "cpu": _shapes((0,), None, (False,)),
    "H100-SXM-80GB": _shapes((1, 8), 2, (True, False)),
    "H200": _shapes((1, 8), 2, (True, False)),
    "A100-SXM4-80GB": _shapes((1, 8), 2, (True, False)),
    "B200": _shapes((1, 8), 2, (True, False)),
    "L40S": _shapes((1, 8), None, (False,)),
}


@dataclass
class Coverage:
    """What the suite does for one SKU on one shape."""

    sku: str
    shape: Shape
    judged: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test -> metrics it judges
    skipped: dict[str, str] = field(default_factory=dict)  # test -> why
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test -> metrics without a limit
    site_declares: dict[str, tuple[str, ...]] = field(default_factory=dict)  # test -> network floors a site sets

    def problems(self) -> list[str]:
        return [
            f"{self.sku} on {self.shape.label}: {test} would ERROR: no limit for {', '.join(metrics)}"
            for test, metrics in sorted(self.missing.items())
        ]


def _present(shape: Shape, feature: Feature) -> bool:
    return shape.nvlink if feature == "nvlink" else shape.ib


def _skip(spec: TestSpec, shape: Shape, limits: dict[str, Limit], sku: str) -> str | None:
    """Why the test skips on this SKU and shape, as the test itself decides it; None when it runs."""
    if spec.gpus != "any" and spec.gpus != "collective" and not shape.gpus:
        return "partition declares no GPUs"
    if spec.gpus == "pair" and shape.gpus < 2:
        return "one GPU: no GPU pair"
    if spec.gpus == "collective" and shape.gpus == 1:
        return "one GPU: no intra-node collective"
    if spec.nodes > shape.nodes:
        return "one node"
    if spec.absent == "nccl_net":
        if limits.get(ABSENCE_METRIC["nccl_net"]) is None:
            return f"SKU {sku} declares no NCCL network transport"
    elif spec.absent is not None and declares_absent(limits.get(ABSENCE_METRIC[spec.absent])):
        if not _present(shape, spec.absent):
            return f"SKU {sku} declares no {'NVLink' if spec.absent == 'nvlink' else 'InfiniBand'}"
    return None


def _has_limit(metric: str, limits: dict[str, Limit], scale: int | None) -> bool:
    return metric in limits or (scale is not None and f"{metric}@{scale}" in limits)


def coverage(thresholds: Thresholds, sku: str, shape: Shape) -> Coverage:
    """Which tests run on ``shape`` for ``sku``, what each judges, and which of those lack a limit."""
    limits = thresholds.limits_for(sku)
    result = Coverage(sku, shape)
    for test, spec in TESTS.items():
        reason = _skip(spec, shape, limits, sku)
        if reason is not None:
            result.skipped[test] = reason
            continue
        metrics = tuple(m for m in spec.metrics if shape.gpus or m not in GPU_ONLY)
        result.judged[test] = metrics
        scale = (shape.nodes if spec.nodes > 1 else shape.gpus or 2) if spec.scaled else None
        missing = tuple(
            m for m in metrics if not thresholds.metrics[m].informational and not _has_limit(m, limits, scale)
        )
        if limits.get(ABSENCE_METRIC["nccl_net"]) is None and shape.gpus:
            network = tuple(m for m in missing if m in NETWORK_METRICS)
            missing = tuple(m for m in missing if m not in NETWORK_METRICS)
            if network:
                result.site_declares[test] = network
        if missing:
            result.missing[test] = missing
    return result
