"""``--probe-timeout`` reaches the container's steps too: the host-side query and the image's first start run
under limits of ``probes/specs.py``, scaled or capped as every probe's, never under numbers of the launcher's own.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuaccept.dispatch import _slurm_options, slurm
from gpuaccept.dispatch.allocation import Allocation
from gpuaccept.dispatch.container import Container, ContainerUnusable
from gpuaccept.dispatch.proc import Finished
from gpuaccept.dispatch.slurm import SlurmLauncher
from gpuaccept.probes.specs import CONTAINER_HOST_QUERY, container_start
from gpuaccept.timelimits import TimeoutRule

DISPATCH = Path(__file__).resolve().parents[2] / "gpuaccept" / "dispatch"


def _started_under(container: Container, rule: TimeoutRule, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The limits the launcher's two container steps ran under (the image's start answers nothing in time)."""
    limits: list[float] = []

    def run_all(argvs: list[list[str]], envs: Any, timeout_s: float, **kwargs: Any) -> Finished:
        limits.append(timeout_s)
        if len(limits) == 1:  # the host-side query: both nodes have what the image needs
            lines = "".join(f"GPUACCEPT_HOST\t{n}\trunc=runc 1.1\tenroot=3.4\thost_python=yes\n" for n in ("n1", "n2"))
            return Finished([0], [lines], [""], False, 1.0)
        return Finished([None], [""], [""], True, timeout_s)

    monkeypatch.setattr(slurm, "run_all", run_all)
    launcher = SlurmLauncher(Allocation("42", ["n1", "n2"], owned=False), container=container, timeout_rule=rule)
    with pytest.raises(ContainerUnusable, match=r"no answer within [\d.]+ s \(") as refused:
        launcher.start_container(lambda message: None)
    assert f"no answer within {limits[1]:g} s" in str(refused.value)
    return limits


@pytest.mark.parametrize("text", ["", "x2", "x0.5,100", "60"])
@pytest.mark.parametrize(
    "container", [Container("oci", "/images/bundle"), Container("pyxis", "docker://nvcr.io#nvidia/pytorch:24.05-py3")]
)
def test_the_container_steps_run_under_the_spec_limits_as_probe_timeout_sets_them(
    text: str, container: Container, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = TimeoutRule.parse(text)
    limits = _started_under(container, rule, monkeypatch)
    assert limits == [rule.apply(CONTAINER_HOST_QUERY).seconds, rule.apply(container_start(container.local)).seconds]
    if text == "":  # the declared limits themselves: a bundle starts in minutes, a registry image is pulled
        assert limits == [120, 300 if container.local else 1800]


def test_the_settings_rule_reaches_the_slurm_launcher() -> None:
    rule = TimeoutRule.parse("x3")
    settings = SimpleNamespace(
        srun_arg=(),
        gpus_per_node=None,
        container_image=None,
        container_bundle=None,
        container_mounts=None,
        probe_timeout=rule,
    )
    assert _slurm_options(settings)["timeout_rule"] is rule  # type: ignore[arg-type]


def test_no_srun_step_of_the_launchers_writes_its_own_limit() -> None:
    """Every ``run_all`` of dispatch/ (the srun steps and the local ranks) takes a limit it was handed (a step's, or a
    spec's through the rule), never a number written at the call."""
    for path in sorted(DISPATCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_all":
                limit = (
                    node.args[2] if len(node.args) > 2 else next(k.value for k in node.keywords if k.arg == "timeout_s")
                )
                assert not any(isinstance(n, ast.Constant) for n in ast.walk(limit)), (
                    f"{path.name}:{node.lineno}: a limit written at the call: {ast.unparse(limit)}"
                )
