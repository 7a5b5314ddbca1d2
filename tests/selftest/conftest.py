"""Selftest fixtures: a real loopback Slurm cluster (never a mocked srun) and pytest-in-pytest runs.

``dev_cluster`` reuses the cluster ``.ci/run`` started (``GPUACCEPT_DEV_CLUSTER`` + ``SLURM_CONF`` in
the environment; under ``pytest -n``, in the first worker only) or starts its own with
``slurm/dev-cluster/up.sh`` and stops it at the end. Without
Slurm installed the Slurm selftests skip locally, but fail in CI (``CI=true``): CI must prove them.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _pytest.mark.expression import Expression  # what ``-m`` parses with; pytest exports no public name

REPO = Path(__file__).resolve().parents[2]
UP = REPO / "slurm" / "dev-cluster" / "up.sh"
DOWN = REPO / "slurm" / "dev-cluster" / "down.sh"


#: what marks a selftest ``loopback`` (it starts or uses a loopback Slurm cluster) or ``inner`` (it runs
#: pytest in a subprocess), found in its code and its fixtures' code, followed through the selftest helpers
#: they call; ``pytest tests/selftest -m "not loopback and not inner"`` is the fast subset
_LOOPBACK_NAMES = frozenset({"dev_cluster", "start_cluster", "UP", "KILL_NODE"})
_INNER_NAMES = frozenset({"run_inner", "pytester", "testdir"})
_INNER_STRINGS = frozenset({"gpuaccept-calibrate", "gpuaccept.calibrate.cli"})
#: ``pytest -n N --dist loadgroup`` keeps each module's tests on one worker (``xdist_group``), so a module
#: fixture's inner run is made once. The longest modules go first, so none starts late and runs alone at the
#: end while the other workers idle; the rest follow in file order (``--no-loadscope-reorder``), taken by
#: whichever worker comes free. Their CI durations on 2 cores (.ci/run's ``--durations``, 2026-11-28):
#: test_training_checkpoint's inner run 350 s, test_chaos's CI rows about 290 s, test_faults_nccl's inner run
#: 160 s and its rows, test_allocation_faults and test_calibrate_loopback about 130 s each, one
#: test_training_progress case 110 s, test_training_agreement 103 s. test_node_death and test_nodecheck_slurm
#: (about 55 s each) mostly wait on Slurm's timeouts: early, beside a worker that trains, their waits leave
#: no core idle; last, both workers waited at once. The three training modules may run at once: each inner
#: run trains in a ``repository_view`` of its own, so none reloads another's adapter from a shared
#: ``reports/training/<shape>`` (in the repository's, two runs' 2r-node1 was one folder).
_LONGEST_FIRST = (
    "test_training_checkpoint.py",
    "test_chaos.py",
    "test_faults_nccl.py",
    "test_allocation_faults.py",
    "test_node_death.py",
    "test_nodecheck_slurm.py",
    "test_calibrate_loopback.py",
    "test_training_progress.py",
    "test_training_agreement.py",
)
#: Under ``pytest -n N`` each worker's loopback clusters and steps keep to ports of their own, so two workers'
#: clusters never meet on a port by construction, not by luck: worker K's Slurm daemons take their base from
#: the K-th thousand of these (``up.sh``'s ``GPUACCEPT_SLURM_PORTS``; ``.ci/run``'s own cluster 10000-10999 below
#: them, perftest's 18515 above), and its steps rendezvous in the K-th of N equal slices of the next range
#: (``GPUACCEPT_RENDEZVOUS_PORTS``, ``gpuaccept/probes/_protocol.py``), below the local launcher's 29400-29899
WORKER_DAEMON_PORTS = range(11000, 18000)
WORKER_RENDEZVOUS_PORTS = range(20000, 29400)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if not Path(str(item.fspath)).is_relative_to(here):
            continue
        item.add_marker(pytest.mark.selftest)
        names, strings = _references(item, here)
        loopback = bool(names & _LOOPBACK_NAMES)
        if loopback:
            item.add_marker(pytest.mark.loopback)
        # ``[sys.executable, "-m", "pytest", ...]``: both strings (assertion rewriting adds "pytest" alone)
        if names & _INNER_NAMES or strings & _INNER_STRINGS or {"-m", "pytest"} <= strings:
            item.add_marker(pytest.mark.inner)
        item.add_marker(pytest.mark.xdist_group(item.path.name))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        longest = {name: rank for rank, name in enumerate(_LONGEST_FIRST)}
        items.sort(key=lambda item: longest.get(item.path.name, len(longest)))


#: the marks a selftest can carry (set above): a ``-m`` expression false for every combination selects none
_SELFTEST_MARK_SETS = tuple(
    frozenset({"selftest"} | extra) for extra in (set(), {"loopback"}, {"inner"}, {"loopback", "inner"})
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the selftests unimported when the ``-m`` expression cannot select one.

    README command 1 (``pytest -m acceptance``) runs from the repository, whose ``testpaths`` hold the
    selftests too; a user who installed the package without the dev extra must not fail collecting a
    selftest on a dev tool it imports (hypothesis), and need not wait for a thousand tests to be collected
    and deselected. The expression is read by pytest's own ``-m`` grammar against the marks that select
    selftests (``selftest``, ``loopback``, ``inner``; pytest's own, ``parametrize`` and the like, select none
    here).
    """
    markexpr = config.getoption("markexpr", default="")
    if not markexpr:
        return None
    try:
        expression = Expression.compile(markexpr)
    except SyntaxError:
        return None  # pytest names the bad expression itself, once, as a usage error
    if any(expression.evaluate(_carries(marks)) for marks in _SELFTEST_MARK_SETS):
        return None
    return True


def _carries(marks: frozenset[str]) -> Callable[..., bool]:
    """An ``-m`` matcher for an item carrying ``marks`` (a mark with arguments, ``name(...)``, by its name)."""

    def matcher(name: str, /, **_: object) -> bool:
        return name in marks

    return matcher


def worker_ports(index: int, count: int) -> tuple[range, range]:
    """xdist worker ``index`` of ``count``: the ports its clusters' daemons and its steps' rendezvous take."""
    daemons = range(WORKER_DAEMON_PORTS.start + 1000 * index, WORKER_DAEMON_PORTS.start + 1000 * (index + 1))
    if daemons.stop > WORKER_DAEMON_PORTS.stop:
        raise pytest.UsageError(f"at most {len(WORKER_DAEMON_PORTS) // 1000} xdist workers: each needs 1000 ports")
    size = len(WORKER_RENDEZVOUS_PORTS) // count
    start = WORKER_RENDEZVOUS_PORTS.start + size * index
    return daemons, range(start, start + size)


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker's ports (``worker_ports``), in the environment every cluster and step it starts inherits."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        daemons, rendezvous = worker_ports(int(worker.removeprefix("gw")), count)
        os.environ["GPUACCEPT_SLURM_PORTS"] = f"{daemons.start}-{daemons.stop - 1}"
        os.environ["GPUACCEPT_RENDEZVOUS_PORTS"] = f"{rendezvous.start}-{rendezvous.stop - 1}"


def _references(item: pytest.Item, here: Path) -> tuple[set[str], set[str]]:
    """The global names and string constants a selftest's code reaches: its function, its fixtures, and
    every function or class of the selftest folder they name (the fixtures' own names count too)."""
    names: set[str] = set(getattr(item, "fixturenames", ()))
    strings: set[str] = set()
    todo: list[Any] = [getattr(item, "obj", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        todo.extend(d.func for d in defs)
    seen: set[int] = set()
    while todo:
        obj = inspect.unwrap(todo.pop()) if todo[-1] is not None else todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        file = inspect.getsourcefile(obj) if inspect.isfunction(obj) or inspect.isclass(obj) else None
        if file is None or not Path(file).is_relative_to(here):
            continue
        members = [m for m in vars(obj).values() if inspect.isfunction(m)] if inspect.isclass(obj) else [obj]
        for function in members:
            codes = [function.__code__]
            while codes:
                code = codes.pop()
                names.update(code.co_names)
                for const in code.co_consts:
                    if isinstance(const, str):
                        strings.add(const)
                    elif inspect.iscode(const):
                        codes.append(const)
                for name in code.co_names:
                    target = function.__globals__.get(name)
                    if inspect.isfunction(target) or inspect.isclass(target):
                        todo.append(target)
    return names, strings


@dataclass
class DevCluster:
    """Environment that points Slurm commands at one loopback cluster."""

    env: dict[str, str]
    directory: Path
    nodes: list[str]

    def cmd(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode:
            raise AssertionError(f"{' '.join(argv)}: {done.returncode}: {done.stderr}")
        return done.stdout

    def jobs(self) -> list[str]:
        """Jobs still pending or running (the allocation leak check)."""
        return self.cmd("squeue", "-h", "-o", "%i %j %T").splitlines()

    def steps(self) -> list[str]:
        return self.cmd("squeue", "-h", "-s", "-o", "%i %j").splitlines()

    def last_job_id(self) -> int:
        out = self.cmd("scontrol", "show", "jobs", "-o", check=False)
        ids = [int(tok.split("=")[1]) for line in out.splitlines() for tok in line.split() if tok.startswith("JobId=")]
        return max(ids, default=0)


def _parse_exports(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            key, value = line[len("export ") :].split("=", 1)
            env[key] = value.strip().strip("'\"")
    return env


def start_cluster(
    nodes: int,
    extra_env: dict[str, str] | None = None,
    *,
    gpus_per_node: int = 0,
    gpu_files: Path | None = None,
    oci: str | None = None,
    own_mounts: bool = False,
    up_args: Sequence[str] = (),
) -> DevCluster:
    """Start a fresh loopback cluster of ``nodes`` nodes (the caller stops it with ``stop_cluster``): the one
    way every selftest starts one. ``gpus_per_node``: the GPUs (gres) each node declares; ``gpu_files``: a
    folder where the ``nvidia<i>`` files backing them are made (``GPUACCEPT_DEV_GPU_FILE``), for a test
    whose probes read injected GPUs. ``oci``: the runtime of Slurm's own containers (``up.sh --oci``).
    ``own_mounts``: each node in a mount namespace of its own (``up.sh --own-mounts``), for one node's filesystem
    to break alone (``slurm/dev-cluster/node-exec.sh``). ``up_args``: more of up.sh's options (``--slurm 26.05
    --blocks 2 --imex``).
    ``extra_env`` goes on top of the cluster's environment."""
    if shutil.which("slurmctld") is None and shutil.which("slurmctld-wlm") is None:
        if os.environ.get("CI"):
            pytest.fail("Slurm is not installed in CI: .ci/run must apt-get install slurm-wlm")
        pytest.skip("Slurm (slurm-wlm) is not installed on this machine")
    base = dict(os.environ)
    if gpu_files is not None:
        for i in range(nodes * gpus_per_node):
            (gpu_files / f"nvidia{i}").touch()
        base["GPUACCEPT_DEV_GPU_FILE"] = str(gpu_files / "nvidia")
    base.pop("SLURM_JOB_ID", None)
    up = ["bash", str(UP), "--nodes", str(nodes)] + (["--gpus-per-node", str(gpus_per_node)] if gpus_per_node else [])
    up += ["--oci", oci] if oci else []
    up += ["--own-mounts"] if own_mounts else []
    up += list(up_args)
    done = subprocess.run(up, env=base, capture_output=True, text=True, timeout=180)
    if done.returncode:
        raise RuntimeError(f"up.sh failed ({done.returncode}):\n{done.stderr[-3000:]}")
    exports = _parse_exports(done.stdout)
    if "PATH" in exports:  # up.sh --slurm 24.11/26.05 prints ``export PATH="ROOT/host-bin:$PATH"``
        exports["PATH"] = exports["PATH"].replace("$PATH", base.get("PATH", ""))
    env = {**base, **exports, **(extra_env or {})}
    cluster = DevCluster(env, Path(exports["GPUACCEPT_DEV_CLUSTER"]), [f"node{i}" for i in range(1, nodes + 1)])
    _check_ports(cluster, base.get("GPUACCEPT_SLURM_PORTS"))
    return cluster


def _check_ports(cluster: DevCluster, ports: str | None) -> None:
    """The cluster's daemons on the ports ``GPUACCEPT_SLURM_PORTS`` gave it (an xdist worker's own)."""
    if not ports or os.environ.get("GPUACCEPT_SLURM_BASE_PORT"):
        return
    first, last = (int(v) for v in ports.split("-"))
    conf = (cluster.directory / "slurm.conf").read_text().splitlines()
    used = [
        int(tok.split("=")[1])
        for line in conf
        for tok in line.split()
        if tok.startswith(("SlurmctldPort=", "SlurmdPort=", "Port="))
    ]
    if not used or not all(first <= port <= last for port in used):
        stop_cluster(cluster)
        raise RuntimeError(f"up.sh put the daemons on {used}, outside GPUACCEPT_SLURM_PORTS={ports}")


def stop_cluster(cluster: DevCluster) -> None:
    subprocess.run(["bash", str(DOWN), str(cluster.directory)], env=cluster.env, capture_output=True, timeout=120)


def _first_session() -> bool:
    """Whether this session is the only one of its run, or the first xdist worker (``gw0``) of several."""
    return os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    """The shared 2-node loopback cluster for selftests that do not break it.

    The environment's cluster serves one session only: under ``pytest -n N`` the first worker takes it and
    every other worker starts its own. Its job list is the tests' leak check and its last job id the dry
    runs' proof that nothing was submitted: a second worker's jobs on the same cluster would fail both."""
    if _first_session() and os.environ.get("GPUACCEPT_DEV_CLUSTER") and os.environ.get("SLURM_CONF"):
        env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
        names = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N"], env=env, capture_output=True, text=True
        ).stdout.split()
        yield DevCluster(env, Path(os.environ["GPUACCEPT_DEV_CLUSTER"]), sorted(set(names)))
        return
    cluster = start_cluster(2)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


@dataclass
class InnerRun:
    """An inner pytest session: its exit code, output and run record."""

    returncode: int
    output: str
    record_path: Path
    duration_s: float

    @property
    def record(self) -> dict[str, Any]:
        return json.loads(self.record_path.read_text())

    def verdicts(self) -> dict[str, str]:
        return {t["nodeid"].split("::")[-1]: t["verdict"] for t in self.record["tests"]}

    def messages(self) -> dict[str, str]:
        return {t["nodeid"].split("::")[-1]: t["message"] for t in self.record["tests"]}


def write_suite(directory: Path, source: str, name: str = "test_inner.py") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(source)
    # the short fixture names (cluster, judge, ...) for the suite's tests, as tests/acceptance/conftest.py has them
    (directory / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p gpuaccept.fixtures\n")
    return directory


def repository_view(directory: Path) -> Path:
    """``directory`` made to stand for the repository to an inner pytest: the ini file, the root conftest and
    ``tests/`` linked into it. A run of ``repository_view(d) / "tests/acceptance/..."`` has the same node ids
    and conftests as one from the repository, but its rootdir, and with it the ``reports/`` it writes
    (``reports/training/<shape>``, where the fine-tunes of a shape keep their runs and reload their adapters),
    is ``directory``: two inner runs that train the same shape on two xdist workers share no folder."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "conftest.py", "tests"):
        (directory / name).symlink_to(REPO / name)
    return directory


def run_inner(directory: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> InnerRun:
    """Run ``python -m pytest`` in ``directory`` with our plugin (installed entry point)."""
    record = directory / "record.json"
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "gpuaccept.fixtures", "--run-record", str(record), *args]
    start = time.monotonic()
    given = (env or os.environ).get("PYTHONPATH")  # kept after ours: an image's steps may need it
    env = {
        **(env or os.environ),
        "GPUACCEPT_SELFTEST": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), given])),
    }
    done = subprocess.run(argv, cwd=directory, env=env, capture_output=True, text=True, timeout=timeout)
    return InnerRun(done.returncode, done.stdout + done.stderr, record, time.monotonic() - start)
