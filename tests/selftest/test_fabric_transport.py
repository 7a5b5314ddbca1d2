"""NCCL transport judged from NCCL_DEBUG=INFO: plugin, GPUDirect, PCIe-affine HCA, every HCA used.

Reads the synthesised 2-node x 8-GPU logs (IB with GDR, IB without GDR, Socket) and the real 2xH200 log
in fixtures/nccl/, and judges them with the packaged thresholds (and the socket site file of the 2 x H200 host).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpuaccept.fabric.affinity import affine_hcas, bus_key
from gpuaccept.fabric.transport import AFFINE, RankTransport, hca_usage, observe_rank
from gpuaccept.judging.judge import Judge
from gpuaccept.nccl.ncclinfo import parse_net_facts, split_processes
from gpuaccept.thresholds.loader import Thresholds, load_thresholds
from gpuaccept.verdicts.fabric import judge_transport

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]
NCCL = REPO / "fixtures" / "nccl"
GPU_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
HCAS = [f"mlx5_{k}" for k in range(8)]


@functools.cache
def thresholds(site: str | None = None) -> Thresholds:
    return load_thresholds(REPO / site if site else None)


def checker(sku: str = "H100-SXM-80GB", site: str | None = None) -> Judge:
    return Judge(thresholds(site), lambda node: sku, lambda result: None, "selftest")


def nvlink_like() -> dict:
    """The nvlink probe's view of an HGX node: GPU k shares a PCIe switch (PXB) with mlx5_k only."""
    return {
        "gpus": [
            {
                "pci_bus_id": f"00000000:{bus:02X}:00.0",
                "nics": [
                    {"name": h, "relation": "PXB" if i == k else ("NODE" if (i < 4) == (k < 4) else "SYS")}
                    for i, h in enumerate(HCAS)
                ],
            }
            for k, bus in enumerate(GPU_BUSES)
        ]
    }


def observe(text: str, affine: dict[str, list[str]] | None = None) -> list[RankTransport]:
    affine = affine if affine is not None else affine_hcas(nvlink_like())
    out = []
    for key, lines in split_processes(text).items():
        net = parse_net_facts(lines)
        bus = bus_key(f"0000:{GPU_BUSES[net['nvml_dev']]:02x}:00.0")
        out.append(
            observe_rank(
                net,
                node=key.split(":")[0],
                rank=net["nvml_dev"],
                gpu=str(net["nvml_dev"]),
                affine=affine.get(bus),
                multinode=True,
            )
        )
    return out


def judge(text: str, limits: Judge) -> list[str]:
    """The log's ranks judged as test_nccl_transport judges them (``verdicts.fabric.judge_transport``), each
    rank a probe record on an HGX node (eight 400 Gb/s HCAs, GPU k affine to mlx5_k)."""
    records = []
    for key, lines in split_processes(text).items():
        net = parse_net_facts(lines)
        gpu = {"pci_bus_id": f"00000000:{GPU_BUSES[net['nvml_dev']]:02X}:00.0"}
        node, rank, label = key.split(":")[0], net["nvml_dev"], str(net["nvml_dev"])
        record = SimpleNamespace(node=node, rank=rank, gpu=gpu, gpu_label=label)
        records.append((record, {"nccl": {"net": net}}))  # the rank and the part of its payload judged
    nodes = {r.node for r, _ in records}
    rates = {n: dict.fromkeys(HCAS, 400.0) for n in sorted(nodes)}
    judge_transport(records, rates, dict.fromkeys(nodes, affine_hcas(nvlink_like())), limits)
    return [f"{f.where}: {f.metric} = {f.value}" for f in limits.failures()]


def log(name: str) -> str:
    return (NCCL / f"nccl_fabric_2x8_{name}.log").read_text()


def test_net_facts_of_one_rank() -> None:
    facts = parse_net_facts(split_processes(log("ib_gdr"))["gpu-a02:41003"])
    assert facts["nvml_dev"] == 3 and facts["bus_id"] == "5d000" and facts["dmabuf"] is True
    assert facts["devices"]["IB"]["3"] == ["mlx5_3"]
    assert facts["channels"]["IB"]["3"] == {"send": 2, "recv": 2, "gdr": 4, "pxn": 0, "proxies": []}
    assert facts["gdr_hca"]["mlx5_3"] is True


def test_healthy_ib_gdr_passes() -> None:
    ranks = observe(log("ib_gdr"))
    assert len(ranks) == 16 and {r.transport for r in ranks} == {"IB"} and {r.gdr for r in ranks} == {1}
    assert {r.affinity for r in ranks} == {AFFINE}
    assert judge(log("ib_gdr"), checker()) == []


def test_ib_without_gdr_fails_naming_each_gpu() -> None:
    failures = judge(log("ib_nogdr"), checker())
    assert len(failures) == 16 and all("nccl_net_gdr = 0" in f for f in failures)
    assert "gpu-a01 GPU 0: nccl_net_gdr = 0" in failures


def test_socket_fallback_fails_naming_the_transport_and_every_idle_hca() -> None:
    failures = judge(log("socket"), checker())
    assert "gpu-a02 GPU 5: nccl_net_transport = Socket" in failures
    assert "gpu-a01 GPU 3: nccl_net_hca_affinity = bond0 (affine: mlx5_3)" in failures
    assert "gpu-a02 HCA mlx5_7: nccl_net_hca_used = 0" in failures


def test_a_site_that_declares_sockets_accepts_them() -> None:
    limits = checker("H200", "fixtures/site/h200-socket-net.yaml")
    for r in observe(log("socket"), affine={}):
        limits.check("nccl_net_transport", r.transport, node=r.node, gpu=r.gpu)
        limits.check("nccl_net_gdr", r.gdr, node=r.node, gpu=r.gpu)
    assert limits.failures() == [] and len(limits.results) == 32


def test_gpu_on_the_wrong_hca_fails_naming_gpu_and_hca() -> None:
    text = log("ib_gdr").replace("via NET/IB/3/GDRDMA", "via NET/IB/5/GDRDMA")
    failures = judge(text, checker())
    assert "gpu-a01 GPU 3: nccl_net_hca_affinity = mlx5_5 (affine: mlx5_3)" in failures
    assert "gpu-a01 HCA mlx5_3: nccl_net_hca_used = 0" in failures and len(failures) == 4


def test_pxn_relay_counts_for_coverage_not_against_affinity() -> None:
    text = log("ib_gdr").replace("[send] via NET/IB/3/GDRDMA", "[send] via NET/IB/2(2)/GDRDMA")
    ranks = {(r.node, r.rank): r for r in observe(text)}
    assert ranks[("gpu-a01", 3)].affinity == AFFINE and ranks[("gpu-a01", 3)].relayed == ("mlx5_2",)
    assert hca_usage(ranks.values(), {"gpu-a01": HCAS})["gpu-a01"]["mlx5_3"] == 1  # still received on it


def test_no_network_channel_in_a_multinode_job() -> None:
    """The real 2 x H200 log: two ranks on one host, NCCL used P2P only; a multi-node job must not pass."""
    text = (NCCL / "nccl_debug_2xh200_rank0.log").read_text()
    r = observe_rank(parse_net_facts(text), node="node1", rank=0, gpu="0", affine=[], multinode=True)
    assert r.transport == "none" and r.gdr is None and r.channels == 0
    limits = checker("H200")
    limits.check("nccl_net_transport", r.transport, node="node1", gpu="0")
    assert limits.failures()[0].reason == "none != IB"


def test_affinity_needs_a_shared_switch() -> None:
    data = {
        "gpus": [
            {"pci_bus_id": "0000:18:00.0", "nics": [{"name": "mlx5_0", "relation": "NODE"}]},
            {
                "pci_bus_id": "0000:2a:00.0",
                "nics": [{"name": "mlx5_1", "relation": "PIX"}, {"name": "mlx5_8", "relation": "PIX"}],
            },
        ]
    }
    assert affine_hcas(data) == {"0000:18:00": [], "0000:2a:00": ["mlx5_1", "mlx5_8"]}
    assert affine_hcas(data, compute=["mlx5_1"]) == {"0000:18:00": [], "0000:2a:00": ["mlx5_1"]}


def test_fabric_line_rate_from_sysfs_judges_a_uniformly_slow_fabric() -> None:
    """8 x NDR 400 = 400 GB/s; 330 GB/s busbw is 82.5% of it (passes), 300 GB/s (a slow fabric) is 75% (fails)."""
    from gpuaccept.fabric.affinity import compute_hcas, group_line_rate_gbs
    from gpuaccept.probes import infiniband

    rates = compute_hcas(infiniband.collect(REPO / "fixtures" / "sysfs" / "hgx-h100-ndr"), "InfiniBand")
    assert sorted(rates) == HCAS and set(rates.values()) == {400.0}  # the Ethernet storage NICs are left out
    line = group_line_rate_gbs({"gpu-a01": rates, "gpu-a02": rates})
    assert line == 400.0
    limits = checker()
    for busbw in (330.0, 300.0):
        limits.check("nccl_busbw_fabric_pct", round(100 * busbw / line, 1), node="gpu-a01")
        limits.check("nccl_all_reduce_busbw_multinode_gbs", busbw, node="gpu-a01")
    assert [(f.metric, f.value) for f in limits.failures()] == [
        ("nccl_busbw_fabric_pct", 75.0),
        ("nccl_all_reduce_busbw_multinode_gbs", 300.0),
    ]


@pytest.mark.parametrize("rank", [0, 1])
def test_recorded_socket_fallback_on_the_h200_host(rank: int) -> None:
    """Real logs (benchmarks/fabric_device.sh on 2 x H200 SXM 141GB, 2026-11-23, two loopback Slurm nodes,
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): every NET channel is NET/Socket without GPUDirect, so the packaged H200
    expectation fails naming Socket and the socket site file accepts it."""
    text = (Path(__file__).parents[2] / "fixtures" / "nccl" / f"nccl_socket_2nodes_rank{rank}.log").read_text()
    seen = observe_rank(
        parse_net_facts(text), node=f"node{rank + 1}", rank=rank, gpu=str(rank), affine=None, multinode=True
    )
    assert (seen.transport, seen.gdr) == ("Socket", 0) and seen.channels > 0
    packaged = checker("H200")
    packaged.check("nccl_net_transport", seen.transport, node=f"node{rank + 1}")
    assert [r.reason for r in packaged.failures()] == ["Socket != IB"]
    declared = checker("H200", "fixtures/site/h200-socket-net.yaml")
    declared.check("nccl_net_transport", seen.transport, node=f"node{rank + 1}")
    declared.check("nccl_net_gdr", seen.gdr, node=f"node{rank + 1}")
    assert not declared.failures()
