"""The plugin's fixtures, all named ``gpuaccept_*``, and the short names the acceptance tests use.

The plugin registers only the ``gpuaccept_*`` fixtures (``gpuaccept_state`` and ``gpuaccept_judge``
live in the plugin), so that, installed in an environment, it shares no fixture name with another
plugin or project (pytest-django has ``settings``). A suite of acceptance tests takes the short names
into its ``conftest.py``::

    from gpuaccept.fixtures import cluster, fingerprints, judge, settings, thresholds  # noqa: F401

(``tests/acceptance/conftest.py`` does), or loads the module as a plugin: ``pytest -p gpuaccept.fixtures``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpuaccept.cluster import Cluster
from gpuaccept.fingerprints import Fingerprints
from gpuaccept.judging.judge import Judge
from gpuaccept.settings import Settings
from gpuaccept.thresholds.loader import Thresholds

__all__ = [
    "cluster",
    "fingerprints",
    "gpuaccept_cluster",
    "gpuaccept_fingerprints",
    "gpuaccept_settings",
    "gpuaccept_thresholds",
    "judge",
    "settings",
    "thresholds",
]

if TYPE_CHECKING:
    from gpuaccept.state import SessionState


@pytest.fixture(scope="session")
def gpuaccept_settings(gpuaccept_state: SessionState) -> Settings:
    """The resolved gpuaccept settings."""
    return gpuaccept_state.settings


@pytest.fixture(scope="session")
def gpuaccept_thresholds(gpuaccept_state: SessionState) -> Thresholds:
    """The merged thresholds in force."""
    return gpuaccept_state.thresholds


@pytest.fixture(scope="session")
def gpuaccept_cluster(gpuaccept_state: SessionState) -> Cluster:
    """Run probes on nodes: ``cluster.run(specs.HYGIENE, nodes=[node], ...)``."""
    return gpuaccept_state.cluster


@pytest.fixture(scope="session")
def gpuaccept_fingerprints(gpuaccept_state: SessionState) -> Fingerprints:
    """Per-node fingerprints and SKU detection."""
    return gpuaccept_state.fingerprints


# ---- the short names, for acceptance tests -----------------------------------------------------------


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
    """Run probes on nodes: ``cluster.run(specs.HYGIENE, nodes=[node], ...)``."""
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
