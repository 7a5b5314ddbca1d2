"""Safe to hand to a tenant (issue 49): what the next tenant of a node inherits from the last one and from the
operator. GPU memory the last job wrote (SEC21), software below a fix of NVIDIA's security bulletins or off the
site's approved list (VMAAS07, CNP09, ATTEST01), the root of trust (SEC22) and the site's health agents
(BFX04). The judges are ``gpuaccept/verdicts/tenant.py``; what the site requires is its ``tenant:`` section
(``gpuaccept/thresholds/tenant_site.py``), and a test it does not declare skips naming the key to set.
"""

from __future__ import annotations

import random

import pytest

from gpuaccept.probes.specs import AGENT, RESIDUE, SOFTWARE, TRUST
from gpuaccept.thresholds.bulletins import load_catalogue
from gpuaccept.verdicts.tenant import (
    agents_absent,
    judge_agents,
    judge_approved,
    judge_bulletins,
    judge_inherited,
    judge_residue,
    judge_scanner_proof,
    judge_trust,
    residue_absent,
    trust_absent,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.tenant]

#: the fill pattern's seed, one per run: every node's fill and scan steps carry the same arguments (one fan-out
#: step each), and a pattern an earlier run left behind is not this run's
SEED = random.SystemRandom().randrange(1, 2**31 - 1)


@pytest.mark.judges(
    "gpu_residue_pattern_bytes", "gpu_residue_nonzero_bytes", "gpu_residue_inherited_nonzero_bytes", gpus="gpu"
)
def test_gpu_memory_left_between_jobs(node, cluster, judge):
    """One step takes every GPU's free memory, first reads what the GPU's previous job left in it (the section
    runs after the fine-tunes), then fills it with this run's pattern and exits; the next step, a new process as
    the next tenant's job, reads fresh allocations uninitialised: none of the pattern may be there. It then plants
    another pattern and scans it in the same process, proving the scanner finds what is there."""
    gpus = cluster.require_gpus(node)

    def step(*args: object):
        return RESIDUE.read(cluster.run(RESIDUE, nodes=[node], tasks_per_node=1, gpus_per_task=gpus, args=args).one())

    fill = step("--mode", "fill", "--seed", SEED)
    scan = step("--mode", "scan", "--seed", SEED, "--plant-seed", SEED + 1)
    if why := residue_absent(scan, node):
        pytest.skip(why)
    judge_inherited(fill, judge, node)
    judge_residue(scan, judge, node, fill)
    judge_scanner_proof(scan, judge, node)


@pytest.mark.judges("software_version", gpus="gpu")
def test_known_vulnerable_software(node, cluster, judge, thresholds):
    """The GPU driver, DCGM and its exporter at or above the fix of every NVIDIA security bulletin naming their
    line (gpuaccept/data/bulletins.json); each component the site approves versions of on its list."""
    gpus = cluster.require_gpus(node)
    software = SOFTWARE.read(cluster.run(SOFTWARE, nodes=[node], tasks_per_node=1, gpus_per_task=gpus).one())
    judge_bulletins(software, load_catalogue(), judge, node)
    judge_approved(software, thresholds.tenant, judge, node)


@pytest.mark.judges("root_of_trust", absent="tenant")
def test_root_of_trust(node, cluster, judge, thresholds):
    """UEFI boot, Secure Boot and a TPM 2.0 where the site requires each (tenant.root_of_trust)."""
    if why := trust_absent(thresholds.tenant, node):
        pytest.skip(why)
    judge_trust(TRUST.read(cluster.run(TRUST, nodes=[node]).one()), thresholds.tenant, judge, node)


@pytest.mark.judges(absent="tenant")
def test_health_agents(node, cluster, judge, thresholds):
    """Every health agent the site names (tenant.agents) running, answering, and (a DCGM exporter) watching
    every GPU of the node: the step holds them all, so NVML sees what the exporter must list."""
    site = thresholds.tenant
    if why := agents_absent(site, node):
        pytest.skip(why)
    args = [arg for agent in site.agents for arg in ("--agent", agent.argument())]
    gpus = {"tasks_per_node": 1, "gpus_per_task": n} if (n := cluster.gpus_on(node)) else {}
    judge_agents(AGENT.read(cluster.run(AGENT, nodes=[node], args=args, **gpus).one()), site, judge, node)
