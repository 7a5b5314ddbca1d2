"""Every hardware fault of docs/faults.md injected through the test seam and named by the real acceptance tests.

One loopback Slurm cluster of 6 nodes, each declaring 2 GPUs as gres (files that stand in for /dev/nvidia*), and one
inner ``pytest -m acceptance --launcher slurm`` run of the GPU-health, Xid, NVLink, topology, affinity, InfiniBand,
fingerprint, version, hygiene, /dev/shm and clock tests. The probes run under srun on every node and read, through
``GPUACCEPT_TEST_INJECT`` (gpuaccept/probes/_inject.py), the 2 x H200 SXM 141GB readings recorded on 2026-11-22
(fixtures/nvml), the recorded-shape NDR sysfs tree and a clean kernel log; the faults of fault_rows.LOOPBACK_ROWS are
laid over the nodes they name, several per node on different GPUs, HCAs or tests. Each row is then proven from the run
record: the test it names ends with the declared verdict and category and names the declared checks at the declared
node, GPU, link or HCA, and no other check of that test fails; every test case no row names (node1 everywhere, and the
healthy tests of the faulty nodes) passes.

Common edits every node gets (the healthy baseline; docs/measurements.md): the per-link NVLink speed
26562 MB/s that NVML's per-link field read on all 18 links of the 2 x H200 SXM 141GB ("2 x H200 SXM 141GB,
2026-11-23: the host, NVLink counters") where the recorded common-speed field is unsupported, and each GPU's
own HCA behind its PCIe switch (PIX), as the HGX reference design places them (the recorded host has none).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import REPO, InnerRun, run_inner, start_cluster, stop_cluster
from .fault_proof import assert_named, assert_nothing_else_fails
from .fault_rows import LOOPBACK_ROWS, Row, idle_links
from .nvml_recordings import older_gpu_health_file, older_nvlink_file
from .test_nodecheck import host_site

NODES, GPUS_PER_NODE = 6, 2
TESTS = [
    "tests/acceptance/test_gpu_health.py",
    "tests/acceptance/test_interconnect.py",
    "tests/acceptance/test_environment.py",
    "tests/acceptance/test_hygiene.py",
    "tests/acceptance/test_node_state.py",
    "tests/acceptance/test_fabric.py",  # last: its counter window closes after the faults of the window rows
]
# errors under load: judged from the P2P copies; NCCL transport and rails: NCCL's own log; both need real GPUs.
# perftest: no RDMA device here (its "not installed" row is proven in test_faults_nccl.py).
DESELECT = "not errors_under_load and not test_nccl_transport and not test_nccl_rails and not test_rdma_perftest"
IDLE_COUNTERS = {"link_count": 18, "per_link": idle_links(range(18)), "errors": {}}
COMMON = {
    "gpu_health": str(older_gpu_health_file()),  # an older recording: a field added since is "not recorded"
    "nvlink": str(older_nvlink_file()),
    "kernel_log": str(REPO / "fixtures/kernel-log/dmesg-h100-clean.txt"),
    "sysfs_root": str(REPO / "fixtures/sysfs/hgx-h100-ndr"),
    "gdr_sysfs_root": str(REPO / "fixtures/sysfs/hgx-h100-gdr"),
    "gdr_proc_root": str(REPO / "fixtures/sysfs/hgx-h100-gdr.proc"),
    # edits of the recording, each named: the per-link speed and the per-link data counters (probes/nvlink.py
    # link_telemetry) it predates, as idle links read them (zero KiB), and the NICs
    "gpus": {
        str(i): {
            "nvlink.speed_mbps_common": 26562,
            "nvlink.telemetry": IDLE_COUNTERS,
            "nics": [{"name": f"mlx5_{i}", "relation": "PIX"}],
        }
        for i in range(GPUS_PER_NODE)
    },
}


def injection(after: bool = False) -> dict[str, Any]:
    """The seam's file: the healthy baseline for every node, each row's fault over its node; ``after``: with
    the faults that appear between the IB counter window's two readings (tests/selftest/_inject_after.py)."""
    nodes: dict[str, dict[str, Any]] = {}
    for row in LOOPBACK_ROWS:
        if row.node is None:  # a fault of every node (perftest not installed): nothing to inject
            continue
        plan = nodes.setdefault(row.node, {})
        for key, value in [*row.inject.items(), *(row.inject_after.items() if after else ())]:
            if key == "gpus":
                for index, edits in value.items():
                    plan.setdefault("gpus", {}).setdefault(index, {}).update(edits)
            elif key in ("set", "sysfs"):
                plan.setdefault(key, {}).update(value)
            elif key == "kernel_log_append":
                plan.setdefault(key, []).extend(value)
            else:
                plan[key] = value
    return {"readings": COMMON, "nodes": nodes}


@pytest.fixture(scope="module")
def injected_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InnerRun]:
    tmp = tmp_path_factory.mktemp("faults")
    cluster = start_cluster(NODES, gpus_per_node=GPUS_PER_NODE, gpu_files=tmp)
    spec, after = tmp / "inject.json", tmp / "inject-after.json"
    spec.write_text(json.dumps(injection(), indent=1))
    after.write_text(json.dumps(injection(after=True), indent=1))
    hook = {"GPUACCEPT_TEST_INJECT_AFTER": str(after), "GPUACCEPT_TEST_INJECT_AFTER_TEST": "test_ib_counter_window"}
    site = host_site(tmp / "site.yaml")
    try:
        inner = tmp / "inner"
        inner.mkdir()
        yield run_inner(
            inner,
            "-m",
            "acceptance",
            "--launcher",
            "slurm",
            "--nodes",
            str(NODES),
            "--thresholds",
            str(site),
            "--rootdir",
            str(REPO),
            "-p",
            "tests.selftest._inject_after",
            "-k",
            DESELECT,
            *(str(REPO / t) for t in TESTS),
            env={**cluster.env, "GPUACCEPT_TEST_INJECT": str(spec), **hook},
            timeout=400,
        )
    finally:
        stop_cluster(cluster)


@pytest.mark.parametrize("row", LOOPBACK_ROWS, ids=[r.key for r in LOOPBACK_ROWS])
def test_fault_is_named(row: Row, injected_run: InnerRun) -> None:
    assert_named(row, injected_run)


def test_nothing_else_fails(injected_run: InnerRun) -> None:
    """Every check a test fails is one a row declares, and every test no row names passes."""
    assert_nothing_else_fails(LOOPBACK_ROWS, injected_run, at_least=7 * NODES)
