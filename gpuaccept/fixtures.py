"""The short fixture names the acceptance tests use, for the acceptance tests only.

The plugin registers its fixtures as ``gpuaccept_*`` so that, installed in an environment, it shares
no fixture name with another plugin or project (pytest-django has ``settings``). A suite of
acceptance tests takes these into its ``conftest.py``::

    from gpuaccept.fixtures import cluster, fingerprints, judge, settings, thresholds  # noqa: F401

(``tests/acceptance/conftest.py`` does), or loads the module as a plugin: ``pytest -p gpuaccept.fixtures``.
"""

from __future__ import annotations

import pytest

from gpuaccept.cluster import Cluster
from gpuaccept.fingerprints import Fingerprints
from gpuaccept.judging.judge import Judge
from gpuaccept.settings import Settings
from gpuaccept.thresholds.loader import Thresholds

__all__ = ["cluster", "fingerprints", "judge", "settings", "thresholds"]


@pytest.fixture(scope="session")
def settings(gpuaccept_settings: Settings) -> Settings:
    """The resolved gpuaccept settings."""
    return gpuaccept_settings


@pytest.fixture(scope="session")
def thresholds(gpuaccept_thresholds: Thresholds) -> Thresholds:
    """The merged thresholds in force."""
    return gpuaccept_thresholds


@pytest.fixture(scope="session")
def cluster(gpuaccept_cluster: Cluster) -> Cluster:
    """Run probes on nodes: ``cluster.run("probe", nodes=[node], ...)``."""
    return gpuaccept_cluster


@pytest.fixture(scope="session")
def fingerprints(gpuaccept_fingerprints: Fingerprints) -> Fingerprints:
    """Per-node fingerprints and SKU detection."""
    return gpuaccept_fingerprints


@pytest.fixture()
def judge(gpuaccept_judge: Judge) -> Judge:
    """The judging core for this test (``judge.check/expect/info/...``); the plugin ends the test from
    its checks."""
    return gpuaccept_judge
