"""The fixtures an acceptance suite imports: ``cluster``, ``fingerprints``, ``judge``, ``settings``, ``thresholds``.

The plugin registers only ``gpuaccept_*`` fixtures (``gpuaccept_state`` and ``gpuaccept_judge``), so that,
installed in an environment, it shares no fixture name with another plugin or project (pytest-django has
``settings``). These short names are registered only where a suite asks for them, in its ``conftest.py``::

    from gpuaccept.fixtures import cluster, fingerprints, judge, settings, thresholds  # noqa: F401

(``tests/acceptance/conftest.py`` does), or by loading the module as a plugin: ``pytest -p gpuaccept.fixtures``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from gpuaccept.cluster import Cluster
from gpuaccept.fingerprints import Fingerprints
from gpuaccept.judging.judge import Judge
from gpuaccept.settings import Settings
from gpuaccept.thresholds.loader import Thresholds

__all__ = ["cluster", "fingerprints", "judge", "settings", "thresholds"]

if TYPE_CHECKING:
    from gpuaccept.state import SessionState


@pytest.fixture(scope="session")
def settings(gpuaccept_state: SessionState) -> Settings:
    """The resolved gpuaccept settings."""
    return gpuaccept_state.settings


@pytest.fixture(scope="session")
def thresholds(gpuaccept_state: SessionState) -> Thresholds:
    """The merged thresholds in force."""
    return gpuaccept_state.thresholds


@pytest.fixture(scope="session")
def cluster(gpuaccept_state: SessionState) -> Cluster:
    """Run probes on nodes: ``cluster.run(specs.HYGIENE, nodes=[node], ...)``."""
    return gpuaccept_state.cluster


@pytest.fixture(scope="session")
def fingerprints(gpuaccept_state: SessionState) -> Fingerprints:
    """Per-node fingerprints and SKU detection."""
    return gpuaccept_state.fingerprints


@pytest.fixture()
def judge(gpuaccept_judge: Judge) -> Judge:
    """The judging core for this test (``judge.check/expect/info/...``); the plugin ends the test from
    its checks. ``gpuaccept_judge`` stays in the plugin: it marks the test judged and collects its metrics
    in the plugin's own stash keys."""
    return gpuaccept_judge
