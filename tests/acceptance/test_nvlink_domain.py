"""Rack-scale NVLink domains (issue 56): the domain is a Slurm block, IMEX spans the job's nodes of it, and
collectives across it ride NVLink (MNNVL/NVLS), proven by NCCL's own init lines.

* ``test_nvlink_block_trays``, ``test_nvlink_block_cliques``: each block the site declares holds its trays; each
  topology/block block holds one fabric clique and no clique spans two blocks (``verdicts/nvlink_block.py``).
  Without blocks: not applicable.
* ``test_imex_domain`` / ``test_imex_channel``: on the allocated nodes of each block, after the site's settle
  window, ``nvidia-imex-ctl -N`` and the step's channel (``verdicts/imex.py``).
* ``test_domain_bandwidth``: all_reduce and all_gather over one block's GPUs with ``NCCL_MNNVL_ENABLE=1
  NCCL_CUMEM_ENABLE=1``, passed only when ``verdicts/nccl_transport.judge_domain_transport(..., expect="mnnvl")`` finds
  MNNVL/NVLS in the init lines; a floor where a cited figure exists (``nvlink_domain_busbw_gbps@72``), other scales
  reported with the figure a named model derives.
* ``test_domain_tray_at_fault``: which tray of a block is slow: NCCL's two passes (``nccl.passes``, the bisection
  ``test_nccl_node_at_fault`` runs over the allocation) inside each allocated block, MNNVL on: groups of 2, 4, ...
  trays side by side, a group below its floor or its sibling groups makes its trays suspects, each suspect paired
  with a tray of the same block that passed; ``nccl_node_verdict`` names the tray. Judged against its block peers,
  so it needs no domain floor (none exists below 72 GPUs); a block of 2 trays cannot tell them apart
  (``undetermined``).
* ``test_domain_network``: the same block with ``NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0``: the network path
  inside a block, passed only on NET transport lines.

Domain tests run on one block's nodes (``--nodelist`` from the topology: the steps name them). Which nodes form
an NVLink domain at all is the site's ``domain.nvlink_domain``, else the SKU's (``nvlink_domain_gpus``:
``verdicts/nvlink_fabric.domain_for``).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuaccept.contracts.imex import ImexRecord
from gpuaccept.contracts.nccl_sweep import group_tables
from gpuaccept.dispatch.slurm_cli import expand_hostlist
from gpuaccept.dispatch.topology import Topology, read_topology
from gpuaccept.probes.specs import IMEX, NCCL
from gpuaccept.thresholds.domain_site import declared_or_default
from gpuaccept.verdicts.imex import imex_absent, judge_imex_channel, judge_imex_domain
from gpuaccept.verdicts.nccl import FAULT_METRICS
from gpuaccept.verdicts.nccl_transport import judge_domain_transport
from gpuaccept.verdicts.nvlink_block import blocks_absent, judge_block_cliques, judge_block_trays, judge_domain_busbw
from gpuaccept.verdicts.nvlink_fabric import domain_for, node_cliques

from .nccl_passes import PairPasses, first_pass, node_verdict

pytestmark = [pytest.mark.acceptance, pytest.mark.interconnect, pytest.mark.multinode]

#: the environment of the domain's collectives: MNNVL on, and cuMem (fabric handles need it: NCCL's MNNVL
#: requires CUMEM, NCCL environment variables documentation)
MNNVL_ENV = {"NCCL_MNNVL_ENABLE": "1", "NCCL_CUMEM_ENABLE": "1"}
#: the network path inside a block: no MNNVL and no NVLink SHARP, so NCCL must use NET (IB) between trays
NETWORK_ENV = {"NCCL_MNNVL_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
#: the sizes of the domain sweep: up to 8 GiB, the size of the one published full-rack figure (coreweave/nccl-tests
#: PR #43: GB200 NVL72 all_reduce 846.8 GB/s busbw at 8 GiB)
DOMAIN_MAX_BYTES = 8 << 30


@pytest.fixture(scope="module")
def topology(cluster: Any) -> Topology:
    """``scontrol show topology``, once for the module (on the record of the first test that asks)."""
    return cluster.scheduler(read_topology)


@pytest.fixture(scope="module")
def pair_passes() -> PairPasses:
    """The bisection's second passes of this module (a block's suspects with its good trays), run once each."""
    return {}


def _allocated_blocks(cluster: Any, topology: Topology) -> dict[str, list[str]]:
    """Each block's nodes in this allocation (those still live), blocks with none left out."""
    live = set(cluster.nodes)
    return {b.name: [n for n in b.nodes if n in live] for b in topology.blocks if live & set(b.nodes)}


def _require_domain(cluster: Any, judge: Any, thresholds: Any) -> None:
    """Skip unless some allocated node must be in an NVLink domain: the site's ``domain.nvlink_domain``, else its
    SKU's default (GB200, GB300: nvl72; HGX boards: none)."""
    site = declared_or_default(thresholds.domain).nvlink_domain
    if not any(domain_for(judge, node, site) == "nvl72" for node in cluster.nodes):
        pytest.skip(
            "not applicable: no allocated node must be in an NVLink domain (its SKU's nvlink_domain_gpus, or "
            "domain.nvlink_domain: nvl72 in a site file)"
        )


def _blocks(cluster: Any, judge: Any, thresholds: Any, topo: Topology) -> dict[str, tuple[str, ...]]:
    """Slurm's blocks, whole (every node of each, allocated or not); skip naming why where there are none."""
    _require_domain(cluster, judge, thresholds)
    blocks = {b.name: b.nodes for b in topo.blocks}
    if why := blocks_absent(blocks, topo.why_no_blocks):
        pytest.skip(why)
    return blocks


@pytest.mark.judges(nodes=2)
def test_nvlink_block_trays(cluster, judge, thresholds, topology):
    """Each block the site declares (domain.blocks) holds its trays, less those listed out, and no other."""
    blocks = _blocks(cluster, judge, thresholds, topology)
    if not declared_or_default(thresholds.domain).blocks:
        pytest.skip("not applicable: the site declares no block's trays (domain.blocks.<name>.trays)")
    judge_block_trays(blocks, thresholds.domain, judge, lambda h: cluster.scheduler(expand_hostlist, h))


@pytest.mark.judges(nodes=2)
def test_nvlink_block_cliques(cluster, judge, thresholds, topology, fingerprints):
    """One fabric clique a block, one block a clique, over the allocated nodes' GPUs (the session-start
    fingerprint's fabric readings: Completed GPUs' cluster UUID and clique ID)."""
    blocks = _blocks(cluster, judge, thresholds, topology)
    cliques = {node: node_cliques(fingerprints.get(node)["fabric"]) for node in cluster.nodes}
    judge_block_cliques(blocks, cliques, judge)


def _imex_records(cluster: Any, thresholds: Any, nodes: list[str]) -> dict[str, ImexRecord]:
    """The IMEX probe on a block's allocated nodes, one step for the domain and the channel tests."""
    settle = declared_or_default(thresholds.domain).imex_settle_s
    result = cluster.run_shared(IMEX, nodes=nodes, args=["--settle-s", settle])
    return {r.node: IMEX.read(r) for r in result.records}


def _imex_blocks(cluster: Any, judge: Any, thresholds: Any, topo: Topology) -> dict[str, list[str]]:
    """The blocks IMEX is judged in: two or more allocated nodes each; skip naming why when there are none."""
    _require_domain(cluster, judge, thresholds)
    blocks = _allocated_blocks(cluster, topo) if topo.blocks else {"(no blocks: the allocation)": list(cluster.nodes)}
    judged = {name: nodes for name, nodes in blocks.items() if imex_absent(name, nodes) is None}
    if not judged:
        pytest.skip("; ".join(why for name, nodes in blocks.items() if (why := imex_absent(name, nodes))))
    return judged


@pytest.mark.judges(nodes=2)
def test_imex_domain(cluster, judge, thresholds, topology):
    """Every allocated node of a block: the daemon answers, all members READY, all C, UP, and the members are
    the block's allocated nodes (``imex_domain: job``) or the whole block (``block``), no others."""
    site = declared_or_default(thresholds.domain)
    for name, nodes in _imex_blocks(cluster, judge, thresholds, topology).items():
        block = topology.block_of(nodes[0])
        expected = list(block.nodes) if site.imex_domain == "block" and block is not None else nodes
        scope = f"the {'whole block' if site.imex_domain == 'block' else 'allocated nodes'} of {name}"
        judge_imex_domain(_imex_records(cluster, thresholds, nodes), expected, scope, judge, block=name)


@pytest.mark.judges(nodes=2)
def test_imex_channel(cluster, judge, thresholds, topology):
    """The step's IMEX channel: one character device, which opens (unmeasured where no IMEX driver exists)."""
    for _, nodes in _imex_blocks(cluster, judge, thresholds, topology).items():
        judge_imex_channel(_imex_records(cluster, thresholds, nodes), judge)


def _block_sweep(cluster: Any, nodes: list[str], env: dict[str, str]) -> Any:
    """all_reduce and all_gather over every GPU of ``nodes``, one rank a GPU, up to 8 GiB."""
    gpus = cluster.require_gpus(nodes[0])
    args = ["--collectives=all_reduce,all_gather", f"--max-bytes={DOMAIN_MAX_BYTES}", "--min-bytes=1048576"]
    return cluster.run(NCCL, nodes=nodes, tasks_per_node=gpus, gpus_per_task=1, args=args, env=env)


def _one_block(cluster: Any, topology: Topology) -> tuple[str, list[str]]:
    """The largest block of the allocation (two nodes at least): its nodes are the step's node list."""
    blocks = _allocated_blocks(cluster, topology)
    if not blocks:
        pytest.skip("not applicable: Slurm lists no topology/block blocks: no NVLink domain to measure across")
    name, nodes = max(blocks.items(), key=lambda item: (len(item[1]), item[0]))
    if len(nodes) < 2:
        pytest.skip(f"not applicable: block {name} has {len(nodes)} allocated node: the domain needs two")
    return name, nodes


@pytest.mark.judges("nvlink_domain_busbw_gbps", gpus="gpu", nodes=2, scaled=True)
def test_domain_bandwidth(cluster, judge, thresholds, topology):
    """all_reduce and all_gather across one block's GPUs over MNNVL: passed only with the transport proven."""
    _require_domain(cluster, judge, thresholds)
    name, nodes = _one_block(cluster, topology)
    result = _block_sweep(cluster, nodes, MNNVL_ENV)
    judge_domain_transport(result.records, judge, expect="mnnvl")
    judge_domain_busbw(group_tables(result.records), judge, block=name, node=nodes[0])


@pytest.mark.judges(*FAULT_METRICS, nodes=2, scaled=True)
def test_domain_tray_at_fault(cluster, judge, thresholds, settings, topology, pair_passes):
    """Each allocated block's trays through NCCL's bisection among themselves (all_reduce and all_gather with
    MNNVL on; gloo on CPU nodes): a slow tray FAILS ``nccl_node_verdict`` naming it, its block peers and every
    other block's trays pass."""
    _require_domain(cluster, judge, thresholds)
    blocks = {name: nodes for name, nodes in _allocated_blocks(cluster, topology).items() if len(nodes) >= 2}
    if not blocks:
        pytest.skip("not applicable: no topology/block block with two allocated trays: no tray to compare")
    for name, nodes in sorted(blocks.items()):
        tables, failing, _ = first_pass(
            cluster, settings, judge, nodes, env=MNNVL_ENV, collectives="all_reduce,all_gather"
        )
        failing = {scale: groups for scale, groups in failing.items() if groups}
        print(f"block {name}: trays {', '.join(nodes)}; failing scales: {sorted(failing) or 'none'}")
        for tray in nodes:
            node_verdict(pair_passes, cluster, settings, judge, tray, nodes, tables, failing, env=MNNVL_ENV)


@pytest.mark.judges(nodes=2)
def test_domain_network(cluster, judge, thresholds, topology):
    """The same block with MNNVL and NVLS off: NCCL must carry the traffic between trays over the network."""
    _require_domain(cluster, judge, thresholds)
    _, nodes = _one_block(cluster, topology)
    result = _block_sweep(cluster, nodes, NETWORK_ENV)
    judge_domain_transport(result.records, judge, expect="net")
