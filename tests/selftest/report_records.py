"""Synthetic run records with GPU figures, for the summary page's selftests (no GPU needed).

Shaped like what the judging core writes on an H200 cluster: per-GPU matmul, HBM, H2D/D2H and P2P
checks with their SKU floors, NCCL busbw per collective with the ``scale`` (and ``group``) extras, a
failing GPU, a could-not-measure test, a drift and a hardware fault, fingerprints per node.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from gpuaccept.results.metrics import MetricResult

NODES = ("gpu-a01", "gpu-a02")
GPUS = 8
BUS = "0000:{:02X}:00.0"
FLOORS = {
    "matmul_bf16_tflops": 700.0,
    "membw_tbps": 4.2,
    "hostbw_h2d_gbps": 50.0,
    "hostbw_d2h_gbps": 50.0,
    "p2p_gbps": 300.0,
}
VALUES = {
    "matmul_bf16_tflops": 760.0,
    "membw_tbps": 4.55,
    "hostbw_h2d_gbps": 55.2,
    "hostbw_d2h_gbps": 54.1,
    "p2p_gbps": 365.0,
}
UNITS = {
    "matmul_bf16_tflops": "TFLOP/s",
    "membw_tbps": "TB/s",
    "hostbw_h2d_gbps": "GB/s",
    "hostbw_d2h_gbps": "GB/s",
    "p2p_gbps": "GB/s",
}
TEST_OF = {
    "matmul_bf16_tflops": "test_compute.py::test_matmul",
    "membw_tbps": "test_memory.py::test_hbm_bandwidth",
    "hostbw_h2d_gbps": "test_memory.py::test_host_bandwidth",
    "hostbw_d2h_gbps": "test_memory.py::test_host_bandwidth",
    "p2p_gbps": "test_interconnect.py::test_p2p",
}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")
SOURCE = "NVIDIA H200 datasheet (floor at 75% of the figure), docs/measurements.md"


def _label(gpu: int) -> str:
    return f"{gpu} ({BUS.format(0x18 + gpu)})"


def _check(
    test: str, metric: str, value: Any, node: str, gpu: str | None, unit: str, floor: float | None, **extra: Any
) -> MetricResult:
    passed = floor is None or (isinstance(value, (int, float)) and value >= floor)
    return MetricResult(
        test=f"tests/acceptance/{test}[{node}]" if "[" not in test else f"tests/acceptance/{test}",
        metric=metric,
        value=value,
        unit=unit,
        node=node,
        sku="H200",
        subject=gpu,
        subject_kind="node" if gpu is None else "pair" if "->" in gpu else "gpu",
        min=floor,
        source=SOURCE,
        verdict="pass" if passed else "fail",
        reason="" if passed else f"{value:g} < min {floor:g}",
        extra=extra,
    )


def _fingerprint(node: str, driver: str) -> dict[str, Any]:
    devices = [
        {"index": g, "name": "NVIDIA H200", "pci_bus_id": BUS.format(0x18 + g), "vbios": "96.00.AF.00.01"}
        for g in range(GPUS)
    ]
    return {
        "node": node,
        "kernel": "5.15.0-113-generic",
        "os": "Ubuntu 22.04.4 LTS",
        "gpus": {"count": GPUS, "driver": driver, "cuda_driver": "12.8", "devices": devices},
        "stack": {"nccl": "2.26.2", "torch": "2.7.0+cu128", "torch_cuda": "12.8", "python": "3.11.7"},
    }


def gpu_record(
    *,
    slow_gpu: bool = True,
    driver: str = "570.124.06",
    started: str = "2026-11-20T10:00:00+00:00",
    scale_curves: bool = False,
) -> dict[str, Any]:
    """An H200 run record: 2 nodes x 8 GPUs; with ``slow_gpu`` GPU 3 of the second node misses matmul."""
    metrics: list[MetricResult] = []
    for n, node in enumerate(NODES):
        for metric, test in TEST_OF.items():
            for gpu in range(GPUS):
                value = VALUES[metric] * (1 - 0.004 * gpu + 0.003 * n)
                if slow_gpu and metric == "matmul_bf16_tflops" and node == NODES[1] and gpu == 3:
                    value = 612.0
                if metric == "p2p_gbps":
                    for peer in range(GPUS):
                        if peer != gpu:
                            where = f"{_label(gpu)} -> {_label(peer)}"
                            metrics.append(
                                _check(
                                    test,
                                    metric,
                                    round(value - peer, 1),
                                    node,
                                    where,
                                    UNITS[metric],
                                    FLOORS[metric],
                                    peer_access=True,
                                )
                            )
                    continue
                metrics.append(_check(test, metric, round(value, 2), node, _label(gpu), UNITS[metric], FLOORS[metric]))
        for c, collective in enumerate(COLLECTIVES):
            busbw = 480.0 - 25 * c + 3 * n
            curve = [[2**k, round(busbw * min(1.0, 2 ** (k - 33)), 1)] for k in range(20, 34)] if scale_curves else None
            extra = {"size": 2**33, **({"curve": curve} if curve else {})}
            metrics.append(
                _check(
                    "test_nccl.py::test_nccl_node",
                    f"nccl_{collective}_busbw_gbs",
                    busbw,
                    node,
                    None,
                    "GB/s",
                    360.0,
                    scale=8,
                    **extra,
                )
            )
            metrics.append(
                _check(
                    "test_nccl.py::test_nccl_scale[all-2-nodes]",
                    f"nccl_{collective}_busbw_multinode_gbs",
                    busbw * 0.8,
                    node,
                    None,
                    "GB/s",
                    300.0,
                    scale=2,
                    group="gpu-a01+gpu-a02",
                    **extra,
                )
            )
    metrics.append(
        MetricResult(
            test="tests/acceptance/test_environment.py::test_versions_consistent",
            metric="versions_consistent",
            value="570.86",
            unit="value",
            node=NODES[1],
            sku="",
            equal="570.124.06",
            verdict="fail",
            reason="570.86 != 570.124.06",
            kind="expectation",
            source="every node must run the same driver",
        )
    )
    metrics.append(
        MetricResult(
            test=f"tests/acceptance/test_gpu_health.py::test_ecc[{NODES[0]}]",
            metric="gpu_ecc_uncorrected_volatile",
            value=2,
            unit="errors",
            node=NODES[0],
            sku="H200",
            subject=_label(5),
            subject_kind="gpu",
            max=0,
            verdict="fail",
            reason="2 > max 0",
            source="NVIDIA: any uncorrected ECC error is a fault",
        )
    )
    tests: dict[str, dict[str, Any]] = {}
    for m in metrics:
        entry = tests.setdefault(
            m.test,
            {
                "nodeid": m.test,
                "verdict": "passed",
                "duration_s": 1.0,
                "message": "",
                "nodes": [m.node] if m.test.endswith(f"[{m.node}]") else [],
                "commands": [],
                "category": None,
                "checks": [],
            },
        )
        entry["checks"].append(m.check_entry())
        if m.verdict == "fail":
            entry["verdict"] = "failed"
    for entry in tests.values():
        if entry["verdict"] == "failed":
            kinds = {c["check"] for c in entry["checks"] if c["verdict"] == "fail"}
            entry["category"] = (
                "drift"
                if "versions_consistent" in kinds
                else "hardware fault"
                if "gpu_ecc_uncorrected_volatile" in kinds
                else "threshold miss"
            )
            entry["message"] = "AssertionError: 1 threshold miss(es): ..."
    tests["tests/acceptance/test_training.py::test_finetune_node[gpu-a01-ddp]"] = {
        "nodeid": "tests/acceptance/test_training.py::test_finetune_node[gpu-a01-ddp]",
        "verdict": "error",
        "duration_s": 300.0,
        "message": "ProbeTimeout: probe finetune on gpu-a01: no result within 300 s",
        "nodes": ["gpu-a01"],
        "commands": [],
        "category": "could not measure",
        "checks": [],
    }
    tests["tests/acceptance/test_interconnect.py::test_infiniband[gpu-a02]"] = {
        "nodeid": "tests/acceptance/test_interconnect.py::test_infiniband[gpu-a02]",
        "verdict": "skipped",
        "duration_s": 0.0,
        "message": "Skipped: gpu-a02 has no InfiniBand HCA",
        "nodes": ["gpu-a02"],
        "commands": [],
        "category": None,
        "checks": [],
    }
    if not slow_gpu:
        for entry in tests.values():
            if entry["verdict"] in ("failed", "error"):
                entry.update(verdict="passed", category=None, message="")
        metrics = [m for m in metrics if m.verdict != "fail"]
        del tests["tests/acceptance/test_environment.py::test_versions_consistent"]
        del tests[f"tests/acceptance/test_gpu_health.py::test_ecc[{NODES[0]}]"]
    counts: dict[str, int] = {}
    for entry in tests.values():
        counts[entry["verdict"]] = counts.get(entry["verdict"], 0) + 1
    finished = dt.datetime.fromisoformat(started) + dt.timedelta(minutes=9)
    return {
        "schema": "gpuaccept.run/1",
        "started": started,
        "finished": finished.isoformat(),
        "duration_s": 540.0,
        "status": "failed" if counts.get("failed") or counts.get("error") else "passed",
        "counts": counts,
        "settings": {},
        "cluster": {"launcher": "slurm", "nodes": list(NODES), "job_id": "4711", "partition": "h200"},
        "thresholds": {
            "files": ["/opt/gpuaccept/thresholds.yaml", "/etc/gpuaccept/site.yaml"],
            "digest": "0123456789abcdef",
            "sha256": {"/opt/gpuaccept/thresholds.yaml": "a" * 64, "/etc/gpuaccept/site.yaml": "b" * 64},
        },
        "fingerprints": {node: _fingerprint(node, driver) for node in NODES},
        "tests": list(tests.values()),
        "metrics": [m.to_dict() for m in metrics],
        "run_medians": {},
        "errors": [],
    }


def older(record: dict[str, Any], *, driver: str = "550.54.15", factor: float = 1.1) -> dict[str, Any]:
    """The same cluster a month earlier: older driver, figures ``factor`` times today's."""
    base = copy.deepcopy(record)
    base["started"] = "2026-10-20T10:00:00+00:00"
    for fp in base["fingerprints"].values():
        fp["gpus"]["driver"] = driver
    for m in base["metrics"]:
        if isinstance(m["value"], (int, float)) and not isinstance(m["value"], bool):
            m["value"] = round(m["value"] * factor, 2)
    return base
