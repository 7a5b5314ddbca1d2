"""NVLink fabric state: each GPU of a node that must be in an NVL72 domain is in the fabric, in one clique.

The readings are the session-start fingerprint's (``fingerprint.fabric``: NVML's fabric info read by the sentinel
method, gpuaccept/probes/_fabric_state.py), so this test takes no step of its own. The domain a node must be in is
the site's ``domain.nvlink_domain``, else its SKU's (``nvlink_domain_gpus`` in thresholds.yaml: GB200 and GB300
nvl72, HGX boards none, where the fabric is shown and never judged as a domain): verdicts/nvlink_fabric.py.
"""

from __future__ import annotations

import pytest

from gpuaccept.thresholds.domain_site import declared_or_default
from gpuaccept.verdicts.c2c import judge_c2c
from gpuaccept.verdicts.nvlink_fabric import domain_for, domain_not_judged, judge_fabric

pytestmark = [pytest.mark.acceptance, pytest.mark.interconnect]


def test_nvlink_fabric(node, fingerprints, judge, thresholds):
    """Every GPU Completed, Success, a non-zero cluster UUID, healthy and not degraded; one clique per node. On a
    node whose domain is none (HGX) the readings and the NVLink-C2C links are shown and the test skips."""
    fp = fingerprints.get(node)
    if not fp["gpus"]["count"]:
        pytest.skip("partition declares no GPUs: no NVLink fabric to read")
    domain = domain_for(judge, node, declared_or_default(thresholds.domain).nvlink_domain)
    judge_fabric(fp["fabric"], domain, judge, node, driver=fp["gpus"]["driver"])
    judge_c2c(fp["fabric"]["c2c"], judge, node)
    reason = domain_not_judged(domain, judge.sku(node))
    if reason is not None:
        pytest.skip(reason)
