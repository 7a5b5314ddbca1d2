"""Declared absences say so: a node whose SKU declares InfiniBand but that shows no HCA gets a failure
naming ``ib_hca_count`` (test_infiniband, test_gpu_nic_affinity) and skips that name the site-file key
that declares such a node (the GPUDirect and IB-counter-window tests), never "nothing was judged ...
(nothing was measured)".

The loopback cluster of test_suite_errors.py with the recorded healthy H200 readings minus the
recorded sysfs trees: the probes read this host's /sys, which has no InfiniBand (as the one-GPU H100 80GB
HBM3 had none), while the packaged H200 SKU declares 8 HCAs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from . import fault_proof
from .conftest import InnerRun
from .test_faults_loopback import COMMON
from .test_suite_errors import injected_run

pytestmark = pytest.mark.selftest

NO_HCA = {k: v for k, v in COMMON.items() if k not in ("sysfs_root", "gdr_sysfs_root", "gdr_proc_root", "gpus")}


@pytest.fixture(scope="module")
def no_hca_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InnerRun]:
    if Path("/sys/class/infiniband").exists():
        pytest.skip("this host has InfiniBand: the probes would read its HCAs")
    yield from injected_run(tmp_path_factory.mktemp("no-hca"), NO_HCA)


def test_nothing_reads_nothing_was_measured(no_hca_run: InnerRun) -> None:
    tests = fault_proof.tests_of(no_hca_run)
    assert tests, no_hca_run.output[-3000:]
    for name, test in tests.items():
        assert "nothing was measured" not in test["message"], (name, test["message"])


def test_the_missing_hca_is_named(no_hca_run: InnerRun) -> None:
    tests = fault_proof.tests_of(no_hca_run)
    for node in ("node1", "node2"):
        infiniband = tests[f"test_infiniband[{node}]"]
        assert infiniband["verdict"] == "failed" and "ib_hca_count = 0" in infiniband["message"], infiniband
        gdr = tests[f"test_gdr_enablement[{node}]"]
        assert gdr["verdict"] == "skipped" and f"{node} has no compute HCA" in gdr["message"], gdr
        assert "skus.H200.limits.ib_hca_count" in gdr["message"], gdr
    window = tests["test_ib_counter_window"]
    assert window["verdict"] == "skipped" and "no counter window to judge" in window["message"], window
    assert "ib_hca_count" in window["message"]
