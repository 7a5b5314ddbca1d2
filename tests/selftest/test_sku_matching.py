"""SKU detection: the NVML names of real boards map to their own SKU or to none, never to a neighbour's.

NVIDIA's names nest ("NVIDIA GB200" contains "B200"), so a substring match hands one product another's
limits. The names below are what NVML (``nvidia-smi --query-gpu=name``) prints on each board; the 2026 boards'
names are the ones seen in public output: "NVIDIA GB200" (sgl-project/sglang #11208, NVIDIA/k8s-test-infra
qx-gb200.xml), "NVIDIA GB300" (k8s-test-infra qx-gb300.xml), "NVIDIA B300 SXM6 AC" (NVIDIA/cosmos-framework
PR #114, ``torch.cuda.get_device_name()``).
"""

from __future__ import annotations

import re

import pytest

from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds

from .conftest import run_inner, write_suite

LISTED = {
    "NVIDIA H100 80GB HBM3": "H100-SXM-80GB",
    "NVIDIA H200": "H200",
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA L40S": "L40S",
    "NVIDIA B200": "B200",
    "NVIDIA GB200": "GB200",  # Grace Blackwell superchip's GPU: its own SKU, not HGX B200's
    "NVIDIA GB300": "GB300",
    "NVIDIA B300 SXM6 AC": "B300",
    "A100-SXM4-80GB": "A100-SXM4-80GB",  # drivers before R510 print no "NVIDIA " prefix
}

#: other products whose names contain a listed one's: each must match nothing
UNLISTED = [
    "NVIDIA GB10",  # DGX Spark's Grace Blackwell chip, neither GB200 nor B200
    "NVIDIA GB300-WS",  # DGX Station's GB300 (another memory and power), not the NVL72 tray's
    "NVIDIA GH200 480GB",  # Grace Hopper, not H200
    "NVIDIA GH200 144G HBM3e",
    "NVIDIA H200 NVL",  # PCIe card
    "NVIDIA A100 80GB PCIe",
    "NVIDIA A100-SXM4-40GB",
    "NVIDIA A100-PCIE-40GB",
    "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL",
    "NVIDIA H800",
    "NVIDIA H20",
    "NVIDIA L40",
    "NVIDIA L4",
    "NVIDIA RTX 6000 Ada Generation",
]


@pytest.mark.parametrize("name", sorted(LISTED))
def test_listed_board_gets_its_sku(name):
    assert load_thresholds().sku_for_gpu(name) == LISTED[name]


@pytest.mark.parametrize("name", UNLISTED)
def test_other_product_matches_no_sku(name):
    assert load_thresholds().sku_for_gpu(name) is None


def test_a_site_sku_wins_over_the_packaged_one_it_overlaps(tmp_path):
    """A calibrated SKU for a listed board (the H100 calibrated as if unlisted) is the one the site meant."""
    site = tmp_path / "site.yaml"
    pattern = "^NVIDIA\\\\ H100\\\\ 80GB\\\\ HBM3$"  # what gpuaccept-calibrate writes (exact_match)
    site.write_text(f'skus:\n  H100-calibrated:\n    match: ["{pattern}"]\n    inherits: gpu-node\n')
    assert load_thresholds(site).sku_for_gpu("NVIDIA H100 80GB HBM3") == "H100-calibrated"


def test_a_name_two_skus_of_one_file_claim_is_a_usage_error(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        'skus:\n  A:\n    match: ["NVIDIA L4"]\n    inherits: gpu-node\n'
        '  B:\n    match: ["NVIDIA L4( .*)?"]\n    inherits: gpu-node\n'
    )
    with pytest.raises(ThresholdsError, match="matches SKUs A and B"):
        load_thresholds(site).sku_for_gpu("NVIDIA L4")


def test_a_bad_pattern_names_file_and_key(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text('skus:\n  X:\n    match: ["NVIDIA (L4"]\n    inherits: gpu-node\n')
    with pytest.raises(ThresholdsError, match=r"skus\.X\.match\.0: not a regular expression"):
        load_thresholds(site)


# the inner session sees a node whose fingerprint shows a GB10 (DGX Spark, no SKU); the probe is faked at the one
# place a fingerprint enters the suite, so everything after it (SKU detection, the usage error) is the real code
CONFTEST = """
from gpuaccept.fingerprints import Fingerprints

def _fake(self, node):
    return {"node": node, "gpus": {"count": 1, "devices": [{"name": "NVIDIA GB10", "index": 0}]}}

def _prefetch(self, nodes):
    for node in nodes:
        self._seen[node] = _fake(self, node)

Fingerprints.get = _fake
Fingerprints.prefetch = _prefetch
"""

SUITE = """
from gpuaccept.probes import specs
import pytest
pytestmark = pytest.mark.acceptance

def test_x(node, cluster, judge):
    cluster.run(specs.HYGIENE, nodes=[node])
    judge.check("nofile", 65536, node=node)
"""


def test_unknown_gpu_stops_before_any_test(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    (suite / "conftest.py").write_text(CONFTEST)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local")
    assert run.returncode == 4, run.output[-3000:]
    assert "'NVIDIA GB10' (NVML name) matches no SKU" in run.output, run.output[-3000:]
    assert "site file" in run.output and "gpuaccept-calibrate" in run.output, run.output[-3000:]
    assert "test_x" not in run.verdicts(), "a test ran on a GPU no SKU lists"
    assert run.record["status"] == "usage error" and "NVIDIA GB10" in " ".join(run.record["errors"])


def test_forced_sku_runs_anyway(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    (suite / "conftest.py").write_text(CONFTEST)
    run = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--sku", "cpu")
    assert run.returncode == EXIT_TEST_HOOKS and set(run.verdicts().values()) == {"passed"}, run.output[-3000:]


@pytest.mark.parametrize("name", sorted(LISTED))
def test_a_listed_name_is_claimed_by_exactly_one_sku(name):
    """No second packaged SKU's pattern fits the name ("NVIDIA GB200" is GB200's alone, not B200's too)."""
    skus = load_thresholds().skus
    claims = [sku for sku, spec in skus.items() if any(re.fullmatch(p, name, re.IGNORECASE) for p in spec.match)]
    assert claims == [LISTED[name]]
