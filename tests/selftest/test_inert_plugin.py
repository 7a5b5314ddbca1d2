"""Installed, the plugin leaves another project's tests alone (issue 31): pytest-xdist and pytest-timeout
do nothing until asked, and neither does gpuaccept.

Another project in the same environment, with its own ``node``, ``settings`` and ``cluster`` fixtures
(pytest-django's ``settings`` is one), runs with plain ``pytest``: no allocation, no gpuaccept output,
no ``reports/`` written. The plugin comes in through its ``pytest11`` entry point, as installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

CONFTEST = """
import pytest

@pytest.fixture
def node():
    return "their-node"

@pytest.fixture
def settings():
    return {"DEBUG": True}

@pytest.fixture
def cluster():
    return "their-cluster"
"""

TESTS = """
def test_their_fixtures(node, settings, cluster):
    assert (node, settings, cluster) == ("their-node", {"DEBUG": True}, "their-cluster")

def test_plain():
    assert 1 + 1 == 2
"""


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUACCEPT_DEV_CLUSTER", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    if not any(ep.value == "gpuaccept.plugin" for ep in importlib.metadata.entry_points(group="pytest11")):
        pytest.fail("gpuaccept is not installed (pip install -e .): its pytest11 entry point is what is tested")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_theirs.py").write_text(TESTS)
    return tmp_path


def test_another_projects_tests_run_untouched(project):
    done = _pytest(project, "-v")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
    assert "test_their_fixtures PASSED" in done.stdout  # no [node1]: our parametrization stayed out
    output = [line for line in (done.stdout + done.stderr).lower().splitlines() if not line.startswith("plugins:")]
    assert not [line for line in output if "gpuaccept" in line or "slurm" in line], done.stdout
    assert not (project / "reports").exists(), "the plugin wrote reports into another project"
    registered = _pytest(project, "--trace-config", "-q")
    assert "gpuaccept/plugin.py" in registered.stdout, "the plugin was not even loaded: nothing was proven"


def test_asking_for_it_is_checked_at_start(project):
    """Any gpuaccept option counts as asking: then its inputs are checked at start (exit 4 naming them)."""
    done = _pytest(project, "--launcher", "local", "--nccl-min-bytes", "8G", "--nccl-max-bytes", "1M")
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--nccl-min-bytes (command line)" in done.stderr


def test_the_plugin_registers_only_gpuaccept_fixture_names():
    """Every fixture the plugin registers for the whole environment is ``gpuaccept_*``; the short names
    live in ``gpuaccept.fixtures`` for acceptance suites to import."""
    from _pytest.fixtures import getfixturemarker

    import gpuaccept.plugin

    names = {name for name, obj in vars(gpuaccept.plugin).items() if getfixturemarker(obj) is not None}
    assert names and all(name.startswith("gpuaccept_") for name in names), names
