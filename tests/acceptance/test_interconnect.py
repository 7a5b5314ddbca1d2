"""Interconnect: NVLink per GPU, the topology between every GPU pair, GPU/NIC/NUMA affinity, InfiniBand.

NVLink and topology come from NVML (probe ``nvlink``), InfiniBand from sysfs (probe ``infiniband``).
Whether a node must have InfiniBand is the SKU's declaration in thresholds.yaml (``ib_hca_count``,
overridable per site): a node of a SKU that expects HCAs and shows none fails; a node whose SKU
declares no InfiniBand expectation (e.g. ``cpu``, ``L40S``) and has no HCA is skipped as such.
"""

from __future__ import annotations

import pytest

from gpuaccept.hardware.ib import judge_ib
from gpuaccept.hardware.nvlink import judge_affinity, judge_nvlink, judge_topology
from gpuaccept.hardware.perf import judge_nvlink_under_load, p2p_record

pytestmark = [pytest.mark.acceptance, pytest.mark.interconnect]


def _nvlink(cluster, node: str, gpus: int) -> dict:
    """One NVML read of the node's links and pairs, judged by the three tests below."""
    return cluster.run_shared("nvlink", nodes=[node], tasks_per_node=1, gpus_per_task=gpus, timeout_s=120).one().data


def test_nvlink(node, cluster, limits):
    """Links active per GPU as the SKU has them, common link speed, CRC/replay/recovery counters bounded."""
    gpus = cluster.require_gpus(node)
    judge_nvlink(_nvlink(cluster, node, gpus), limits, node, declared_gpus=gpus)


def test_nvlink_errors_under_load(node, cluster, limits, thresholds, fingerprints):
    """NVLink CRC error rate (flit, data: DCGM's 100/s) and replay/recovery counts while the P2P copies ran.

    A count since the driver loaded has no time base; errors while the links carry traffic do. Judged
    from the same copies as ``test_p2p`` (one measurement), apart from it so a link-error finding does
    not hide the bandwidth verdict, and the failure names the links the errors sat on.
    """
    if cluster.require_gpus(node) < 2:
        pytest.skip(f"{node} declares one GPU: no GPU pair to load the NVLinks")
    sku = fingerprints.sku_of(node)
    if "nvlink_links_active" not in thresholds.limits_for(sku):
        pytest.skip(f"SKU {sku} declares no NVLink (no nvlink_links_active limit)")
    judge_nvlink_under_load(p2p_record(cluster, node), limits, node)


def test_gpu_topology(node, cluster, limits):
    """Every GPU pair joined by the SKU's NVLinks (NV18 on HGX H100/H200) with NVLink P2P OK."""
    gpus = cluster.require_gpus(node)
    if gpus < 2:
        pytest.skip(f"{node} declares one GPU: there is no GPU pair")
    judge_topology(_nvlink(cluster, node, gpus), limits, node)


def test_gpu_nic_affinity(node, cluster, limits):
    """Report each GPU's NUMA node, local CPUs and nearest InfiniBand HCA (no pass criterion beyond readable)."""
    gpus = cluster.require_gpus(node)
    judge_affinity(_nvlink(cluster, node, gpus), limits, node)


def test_infiniband(node, cluster, limits, thresholds, fingerprints):
    """HCA count per the SKU; every compute port ACTIVE/LinkUp at the SKU's rate and link layer; counters bounded."""
    sku = fingerprints.sku_of(node)
    expected = thresholds.limits_for(sku)
    data = cluster.run("infiniband", nodes=[node], timeout_s=60).one().data
    if "ib_hca_count" not in expected and not data.get("hcas"):
        pytest.skip(f"SKU {sku} declares no InfiniBand expectation and {node} has no HCA")
    layer = expected.get("ib_link_layer")
    judge_ib(data, limits, node, link_layer=None if layer is None else str(layer.equal))
