"""README command 1 collects the acceptance suite in an install without the dev extra.

A newcomer installs the package alone and runs ``pytest -m acceptance`` in the repository, whose
``testpaths`` also hold the selftests; a selftest that imports a dev tool at module level (hypothesis) once
broke that command's collection, and only the last step of ``.ci/run`` (a fresh venv) saw it, 20 minutes in.
This proves the same in seconds: every module of the dev extra's distributions made unimportable, their pytest
plugins off, as in a venv that never installed them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import distribution, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]

#: run in the child: refuse every module named in argv[1] (comma-separated), then hand the rest to pytest
_BLOCKING_PYTEST = """
import sys
from importlib.abc import MetaPathFinder

blocked = set(sys.argv[1].split(","))

class DevExtraAbsent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (the dev extra is not installed)", name=name)
        return None

sys.meta_path.insert(0, DevExtraAbsent())
import pytest

sys.exit(pytest.main(sys.argv[2:]))
"""


def _dev_only() -> tuple[set[str], set[str]]:
    """The dev extra's own distributions (not also needed by the package or another extra), as the installed
    package's metadata lists them: their modules and their pytest plugins."""
    extras: dict[str, set[str]] = {}
    for line in requires("gpuaccept") or []:
        requirement = Requirement(line)
        marker = str(requirement.marker or "")
        extra = re.search(r'extra == "([^"]+)"', marker)
        extras.setdefault(extra.group(1) if extra else "", set()).add(requirement.name)
    dev = extras["dev"] - set().union(*(names for extra, names in extras.items() if extra != "dev"))
    owners = packages_distributions()
    modules: set[str] = set()
    plugins: set[str] = set()
    for name in dev - {"gpuaccept"}:
        canonical = distribution(name).metadata["Name"]
        modules |= {module for module, dists in owners.items() if canonical in dists}
        plugins |= {ep.name for ep in distribution(name).entry_points if ep.group == "pytest11"}
    return modules, plugins


#: a newcomer's shell: no pytest-xdist worker, Slurm job or suite setting inherited from the selftest run
_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SLURM_", "GPUACCEPT_"))}
#: README command 1's pytest (its ``-m`` given by each test), collecting only, on this machine alone: the question
#: is collection, not Slurm
_COMMAND_1 = ("--launcher", "local", "--collect-only", "-q", "-p", "no:cacheprovider")


def _collect(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """A pytest collection in the repository, run as ``argv`` (up to pytest's own arguments); its run record in
    ``tmp_path``, so the repository's reports/ keeps only the runs its user made."""
    run = subprocess.run(
        [sys.executable, *argv, *_COMMAND_1, "--run-record", str(tmp_path / "record.json")],
        cwd=REPO,
        env=_ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.returncode, run.stdout + run.stderr


def test_acceptance_collects_without_the_dev_extra(tmp_path: Path) -> None:
    modules, plugins = _dev_only()
    assert "hypothesis" in modules  # the one that broke it: the blocking covers it
    off = [arg for plugin in sorted(plugins) for arg in ("-p", f"no:{plugin}")]
    returncode, output = _collect(tmp_path, "-c", _BLOCKING_PYTEST, ",".join(sorted(modules)), *off, "-m", "acceptance")
    assert returncode == 0, output[-3000:]
    assert re.search(r"^\d+ tests collected", output, re.MULTILINE), output[-3000:]
    assert "tests/selftest" not in output, output[-3000:]


def test_a_bad_mark_expression_is_pytests_own_usage_error(tmp_path: Path) -> None:
    """The selftests' ``-m`` reading leaves a malformed expression to pytest: one usage error, no traceback."""
    returncode, output = _collect(tmp_path, "-m", "pytest", "-m", "acceptance and")
    assert returncode == 4 and "Wrong expression passed to '-m'" in output, output[-3000:]
    assert "Traceback" not in output and "ERROR collecting" not in output, output[-3000:]
