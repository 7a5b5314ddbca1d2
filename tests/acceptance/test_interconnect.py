"""Interconnect: NVLink per GPU, the topology between every GPU pair, GPU/NIC/NUMA affinity, InfiniBand.

NVLink and topology come from NVML (probe ``nvlink``), InfiniBand from sysfs (probe ``infiniband``).
Whether a node must have NVLink or InfiniBand is the SKU's declaration in thresholds.yaml
(``nvlink_links_active``, ``ib_hca_count``, overridable per site): a node of a SKU that expects them and
shows none fails; a node whose SKU declares them absent (no limit, or ``equal: 0``: ``L40S`` has no
NVLink, ``cpu`` no HCA) and shows none is skipped naming that absence, by the one rule
``declares_absent`` that the coverage selftest also applies (gpuaccept/thresholds/coverage.py), which the
judges' modules apply (``gpuaccept/verdicts/nvlink.py``, ``gpuaccept/verdicts/infiniband.py``).
"""

from __future__ import annotations

import pytest

from gpuaccept.contracts.fabric import NvlinkPayload
from gpuaccept.probes.specs import INFINIBAND, NVLINK
from gpuaccept.verdicts.infiniband import PORT_METRICS, ib_absent, judge_ib
from gpuaccept.verdicts.nvlink import (
    AFFINITY_METRICS,
    NVLINK_METRICS,
    TOPOLOGY_METRICS,
    UNDER_LOAD_METRICS,
    affinity_absent,
    judge_affinity,
    judge_nvlink,
    judge_nvlink_under_load,
    judge_topology,
    nvlink_absent,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.interconnect]


def _nvlink(cluster, node: str, gpus: int) -> NvlinkPayload:
    """One NVML read of the node's links and pairs, judged by the three tests below."""
    return NVLINK.read(cluster.run_shared(NVLINK, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one())


@pytest.mark.judges(*NVLINK_METRICS, gpus="gpu", absent="nvlink")
def test_nvlink(node, cluster, judge):
    """Links active per GPU as the SKU has them, each giving its per-link data counters (TELEM07), common link
    speed, CRC/replay/recovery counters bounded."""
    gpus = cluster.require_gpus(node)
    data = _nvlink(cluster, node, gpus)
    if why := nvlink_absent(judge, node, data):
        pytest.skip(why)
    judge_nvlink(data, judge, node)


@pytest.mark.judges(*UNDER_LOAD_METRICS, gpus="pair", absent="nvlink")
def test_nvlink_errors_under_load(node, cluster, gpubench, judge):
    """NVLink CRC error rate (flit, data: DCGM's 100/s) and replay/recovery counts while the P2P copies ran.

    A count since the driver loaded has no time base; errors while the links carry traffic do. Judged
    from the same copies as ``test_p2p`` (one measurement), apart from it so a link-error finding does
    not hide the bandwidth verdict, and the failure names the links the errors sat on.
    """
    if cluster.require_gpus(node) < 2:
        pytest.skip(f"{node} declares one GPU: no GPU pair to load the NVLinks")
    if why := nvlink_absent(judge, node):
        pytest.skip(why)
    judge_nvlink_under_load(gpubench(node), judge, node)


@pytest.mark.judges(*TOPOLOGY_METRICS, gpus="pair", absent="nvlink")
def test_gpu_topology(node, cluster, judge):
    """Every GPU pair joined by the SKU's NVLinks (NV18 on HGX H100/H200) with NVLink P2P OK. A PCIe-only SKU
    (L40S) has no NVLink topology to judge; its pairs' bandwidth is test_p2p's."""
    gpus = cluster.require_gpus(node)
    if gpus < 2:
        pytest.skip(f"{node} declares one GPU: there is no GPU pair")
    data = _nvlink(cluster, node, gpus)
    if why := nvlink_absent(judge, node, data):
        pytest.skip(why)
    judge_topology(data, judge, node)


@pytest.mark.judges(*AFFINITY_METRICS, gpus="gpu", absent="ib")
def test_gpu_nic_affinity(node, cluster, judge):
    """Each GPU's nearest InfiniBand HCA close enough for GPUDirect RDMA (same PCIe root complex or closer);
    NUMA node and local CPUs shown beside it. A node without HCAs whose SKU expects none is skipped."""
    gpus = cluster.require_gpus(node)
    data = _nvlink(cluster, node, gpus)
    if why := affinity_absent(judge, node, data):
        pytest.skip(why)
    judge_affinity(data, judge, node)


@pytest.mark.judges(*PORT_METRICS, absent="ib")
def test_infiniband(node, cluster, judge):
    """HCA count per the SKU; every compute port ACTIVE/LinkUp at the SKU's rate and link layer; counters bounded."""
    data = INFINIBAND.read(cluster.run(INFINIBAND, nodes=[node]).one())
    if why := ib_absent(judge, node, data):
        pytest.skip(why)
    judge_ib(data, judge, node)
