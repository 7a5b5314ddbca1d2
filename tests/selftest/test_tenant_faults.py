"""The proofs of tests/selftest/fault_rows_tenant.py: each fault through the real probe code where it runs without a
GPU (the residue fill and scan on CPU tensors, the trust probe on a sysfs tree, the agent probe on a /proc tree,
the neighbours probe's merge), the real judges of ``gpuaccept/verdicts/`` and the real ``Judge`` with the packaged
catalogue, ended by ``judging.outcome`` as the plugin ends a test.

The neighbour row on GPUs (pending; the lead runs it on a node of 2 or more GPUs): start the suite's test and, as
soon as the probe's "both halves at once" phase begins, a real neighbour on half A's first GPU, e.g.

    pytest -m tenant -k neighbours --thresholds <site.yaml> &
    until ls -d ${TMPDIR:-/tmp}/gpuaccept-neighbours-*/together 2>/dev/null; do sleep 0.2; done
    python3 benchmarks/neighbour.py --gpu 0 --mode sm --seconds 40     # or --mode hbm: the hbm figure drops

Half A's GPU 0 then runs its together windows beside that process: its matmul (or hbm) ratio drops while its
figures alone were measured clean, and the test names it (``GPU 0 ... of half A ... beside half B ...``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from gpuaccept.contracts.tenant import ResidueGpu, ResidueRecord, SoftwareRecord
from gpuaccept.judging.judge import Judge
from gpuaccept.probes import agent, residue, trust
from gpuaccept.probes.neighbours import merge
from gpuaccept.thresholds.bulletins import load_catalogue
from gpuaccept.thresholds.loader import default_path, load_thresholds
from gpuaccept.thresholds.tenant_site import TenantSite
from gpuaccept.verdicts.neighbours import judge_neighbours
from gpuaccept.verdicts.tenant import (
    agents_absent,
    judge_agents,
    judge_bulletins,
    judge_inherited,
    judge_residue,
    judge_scanner_proof,
    judge_trust,
)

from .ending import ends

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures" / "tenant"
LOOPBACK_SITE = REPO / "fixtures" / "site" / "loopback-tenant.yaml"
MIB = 2**20


def _judge(site: Path | None = None, sku: str = "H100-SXM-80GB") -> Judge:
    return Judge(load_thresholds(site), lambda node: sku, lambda result: None, "selftest")


# ---- residue -------------------------------------------------------------------------------------------------


def _scan_gpu(index: int, chunks: list[torch.Tensor], seed: int) -> ResidueGpu:
    found = residue.scan(chunks, seed)
    return _entry(index, found)


def _entry(index: int, found: dict[str, Any], total: int = 2 * MIB) -> ResidueGpu:
    """GPU ``index``'s entry as the probe builds it (``residue.gpu_entry``) from what a step read on CPU tensors."""
    ident = {"index": index, "name": "CPU tensors", "pci_bus_id": f"00000000:{index + 6:02X}:00.0"}
    return residue.gpu_entry(ident, found, total=total, free=total, seconds=0.0)


def test_residue_left_for_the_next_job_fails_that_gpu() -> None:
    """GPU 1's memory holds the fill step's pattern when the scan step gets it (at another page offset: a
    512-byte shift); GPU 0's was zeroed. Only GPU 1 fails, with the seed and tag beside the figure."""
    seed = 424242
    backing = torch.zeros((MIB + 4096) // 8, dtype=torch.int64)
    filled = residue.fill([backing], seed)
    handed_over = backing[64 : 64 + MIB // 8]
    fill = ResidueRecord(
        mode="fill",
        seed=seed,
        tag=f"0x{residue.tag_of(seed):08x}",
        cuda=True,
        why=None,
        gpus=[_entry(i, {"bytes": filled}) for i in (0, 1)],
    )
    scan = ResidueRecord(
        mode="scan",
        seed=seed,
        tag=fill.tag,
        cuda=True,
        why=None,
        gpus=[
            _scan_gpu(0, [torch.zeros(MIB // 8, dtype=torch.int64)], seed),
            _scan_gpu(1, [handed_over], seed),
        ],
    )
    judge = _judge()
    with ends(judge, "failed", match=r"node2 GPU 1 \(00000000:07:00.0\): gpu_residue_pattern_bytes = 1048576 ") as e:
        judge_residue(scan, judge, "node2", fill)
    assert "GPU 0" not in e.value
    found = {r.subject: r for r in judge.results if r.metric == "gpu_residue_pattern_bytes"}
    assert found["1 (00000000:07:00.0)"].extra["tag"] == fill.tag
    left = {r.subject: r.extra["driver_left"] for r in judge.results if r.metric == "gpu_residue_nonzero_bytes"}
    assert left["0 (00000000:06:00.0)"] == "zeros"


def test_a_blind_scanner_fails_its_proof() -> None:
    """A plant whose scan looks for another seed's pattern finds none of it: the proof fails, so a clean scan by
    the same scanner would prove nothing."""
    chunks = [torch.zeros(MIB // 8, dtype=torch.int64)]
    residue.fill(chunks, seed=5)
    plant = ResidueRecord(mode="plant", seed=6, tag="0x0", cuda=True, why=None, gpus=[_scan_gpu(0, chunks, seed=6)])
    judge = _judge()
    with ends(judge, "failed", match=r"node2 GPU 0 .*gpu_residue_scanner_proof = not found in 1048576 bytes scanned"):
        judge_scanner_proof(plant, judge, "node2")


def test_a_previous_jobs_bytes_fail_the_inherited_scan() -> None:
    """The fill step's first look at its allocation: GPU 1 holds what the previous job wrote there (a fine-tune's
    bf16 weights, here random bytes), GPU 0 zeros. Only GPU 1 fails, with the commonest words it held."""
    held = residue.scan([torch.randint(1, 2**62, (MIB // 8,), dtype=torch.int64)], seed=1)
    clean = residue.scan([torch.zeros(MIB // 8, dtype=torch.int64)], seed=1)
    fill = ResidueRecord(
        mode="fill",
        seed=1,
        tag="0x0",
        cuda=True,
        why=None,
        gpus=[
            _entry(
                i,
                {
                    "bytes": MIB,
                    "inherited_nonzero_bytes": found["nonzero_bytes"],
                    "inherited_top_values": found["top_values"],
                },
            )
            for i, found in enumerate((clean, held))
        ],
    )
    judge = _judge()
    with ends(judge, "failed", match=r"node2 GPU 1 \(00000000:07:00.0\): gpu_residue_inherited_nonzero_bytes = ") as e:
        judge_inherited(fill, judge, "node2")
    assert "GPU 0" not in e.value
    left = {r.subject: r.extra["previous_job_left"] for r in judge.results}
    assert left["0 (00000000:06:00.0)"] == "zeros" and left["1 (00000000:07:00.0)"].startswith("0x")


def test_the_scan_steps_own_proof_is_judged() -> None:
    """The scan step plants another seed after its scan (``--plant-seed``): found, the proof passes; a scan step
    that planted nothing is unmeasured, never a pass."""
    proof = _entry(0, {"bytes": MIB, "proof_bytes": MIB, "proof_pattern_bytes": MIB}, total=MIB)
    judge = _judge()
    with ends(judge, "passed"):
        judge_scanner_proof(
            ResidueRecord(mode="scan", seed=1, tag="0x0", cuda=True, why=None, gpus=[proof]), judge, "node2"
        )
    bare = _entry(0, {"bytes": MIB}, total=MIB)
    judge = _judge()
    with ends(judge, "error", match="the scan step planted no pattern"):
        judge_scanner_proof(
            ResidueRecord(mode="scan", seed=1, tag="0x0", cuda=True, why=None, gpus=[bare]), judge, "node2"
        )


# ---- software ------------------------------------------------------------------------------------------------


def _software(name: str) -> SoftwareRecord:
    return SoftwareRecord.model_validate(json.loads((FIXTURES / f"software-{name}.json").read_text()))


def test_a_driver_below_a_bulletin_fix_fails_naming_fix_and_bulletin() -> None:
    judge = _judge()
    with ends(judge, "failed") as ended:
        judge_bulletins(_software("580.95.05"), load_catalogue(), judge, "node2")
    assert "node2 field gpu_driver: software_bulletin = gpu_driver 580.95.05 (fixed in 580.159.03: bulletin 5821" in (
        ended.value
    )
    assert "(fixed in 580.126.09: bulletin 5747" in ended.value
    assert "dcgm 4.5.2 (fixed in 4.5.3: bulletin 5857" in ended.value
    healthy = _judge()
    with ends(healthy, "passed"):
        judge_bulletins(_software("580.159.04"), load_catalogue(), healthy, "node1")


# ---- root of trust -------------------------------------------------------------------------------------------


def test_secure_boot_off_where_required_fails() -> None:
    site = TenantSite.model_validate(
        {"source": "site security baseline", "root_of_trust": {"uefi": True, "secure_boot": True, "tpm": False}}
    )
    judge = _judge()
    with ends(judge, "failed", match=r"node2: secure_boot = disabled .*!= enabled") as ended:
        judge_trust(trust.collect(FIXTURES / "sysfs-secureboot-off"), site, judge, "node2")
    assert "uefi_boot" not in ended.value
    assert {r.metric: r.verdict for r in judge.results} == {
        "uefi_boot": "pass",
        "secure_boot": "fail",
        "root_of_trust": "info",
    }


# ---- health agents -------------------------------------------------------------------------------------------


def _proc(root: Path, processes: dict[int, str]) -> Path:
    """A /proc tree holding ``pid -> comm`` (cmdline the same name, as a daemon started by path has)."""
    for pid, comm in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "comm").write_text(comm + "\n")
        (root / str(pid) / "cmdline").write_bytes(f"/usr/sbin/{comm}\0-f\0slurm.conf\0".encode())
    return root


def test_an_agent_not_running_on_one_node_fails_that_node(tmp_path: Path) -> None:
    """The loopback site declares slurmd as every node's agent; node2's /proc has none."""
    site = load_thresholds(LOOPBACK_SITE).tenant
    assert site is not None and agents_absent(site, "node1") is None and isinstance(site.agents, list)
    declared = [a.model_dump(exclude_none=True) for a in site.agents]
    procs = {"node1": {4242: "slurmd", 4243: "bash"}, "node2": {5151: "bash"}}
    verdicts = {}
    for node, processes in procs.items():
        record = agent.collect(declared, proc=_proc(tmp_path / node, processes))
        judge = _judge(LOOPBACK_SITE, sku="cpu")
        with ends(judge, "failed" if node == "node2" else "passed") as ended:
            judge_agents(record, site, judge, node)
        verdicts[node] = ended.value
    assert "node2 field slurmd: health_agent_running = no process named slurmd" in verdicts["node2"]


# ---- neighbours ----------------------------------------------------------------------------------------------


def _half(index: int, bus: str, matmul: float, hbm: float = 3.0, h2d: float = 55.0) -> dict[str, object]:
    """One half's result as the probe's child writes it: one GPU, its three figures."""
    gpu = {"index": index, "uuid": f"GPU-{index}", "pci_bus_id": bus, "name": "NVIDIA H100 80GB HBM3"}
    return {"gpus": [gpu], "busy": [], "figures": {"matmul": [matmul], "hbm": [hbm], "h2d": [h2d]}, "windows": {}}


A0, B1 = "00000000:18:00.0", "00000000:2A:00.0"


def _slowed() -> object:
    solo = {"A": _half(0, A0, 700.0), "B": _half(1, B1, 702.0)}
    together = {"A": _half(0, A0, 385.0), "B": _half(1, B1, 699.0, h2d=54.0)}
    return merge(solo, together, seconds=3)


def test_a_slowed_half_fails_naming_both_gpu_sets() -> None:
    """Against the packaged limits (docs/measurements.md 'GPU VMs, 2026-11-28: storage and tenant safety') half A's
    GPU 0 at 55% of its matmul alone fails, naming its half, the other half and the figure; everything else passes."""
    judge = _judge()
    record = _slowed()
    with ends(judge, "failed") as ended:
        judge_neighbours(record, judge, "node1")  # type: ignore[arg-type]
    line = "node1 GPU 0 (00000000:18:00.0) of half A (GPU 0) beside half B (GPU 1): neighbour_matmul_ratio_pct = 55.0"
    assert line in ended.value, ended.value
    assert [r.verdict for r in judge.results].count("fail") == 1
    failed = next(r for r in judge.results if r.verdict == "fail")
    assert (failed.extra["solo"], failed.extra["together"]) == (700.0, 385.0)


def test_a_site_without_limits_judges_nothing_and_errs(tmp_path: Path) -> None:
    """A site whose catalogue held the ratios informational (no limit anywhere) shows them, and the test ERRORs
    rather than pass on figures nobody judged."""
    packaged = yaml.safe_load(default_path().read_text())
    for name in ("neighbour_matmul_ratio_pct", "neighbour_hbm_ratio_pct", "neighbour_h2d_ratio_pct"):
        spec = packaged["metrics"][name]
        spec.pop("requirements", None)
        packaged["metrics"][name] = {**spec, "limit_optional": True, "no_requirement": "a selftest's copy: not judged"}
        for key in [k for k in packaged["defaults"] if k == name or k.startswith(f"{name}@")]:
            packaged["defaults"].pop(key)
    copy = tmp_path / "thresholds.yaml"
    copy.write_text(yaml.safe_dump(packaged))
    judge = Judge(load_thresholds(defaults=copy), lambda node: "H100-SXM-80GB", lambda result: None, "t")
    with ends(judge, "error", match="nothing was judged"):
        judge_neighbours(_slowed(), judge, "node1")  # type: ignore[arg-type]


def test_proc_tree_helper_reads_like_proc() -> None:
    """The fake /proc above is read as the real one is: this process's own comm is found in the real /proc."""
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert os.getpid() in agent.running_pids(comm)
