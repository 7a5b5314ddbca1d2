"""Settings resolve in one order (command line > environment > ini) and bad values name their source."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.settings import OPTIONS, Option, Settings, SettingsError, resolve
from gpuaccept.timelimits import TimeoutRule


class FakeConfig:
    def __init__(self, cli: dict[str, Any] | None = None, ini: dict[str, Any] | None = None) -> None:
        self._cli = cli or {}
        self._ini = ini or {}
        self.inipath = Path("/etc/pytest.ini")

    def getoption(self, name: str, default: Any = None) -> Any:
        return self._cli.get(name.removeprefix("gpuaccept_"), default)

    def getini(self, name: str) -> Any:
        return self._ini.get(name.removeprefix("gpuaccept_"))


def test_order_cli_env_ini():
    config = FakeConfig(cli={"partition": "cli-part"}, ini={"partition": "ini-part", "nodes": "3", "qos": "high"})
    settings = resolve(config, {"GPUACCEPT_PARTITION": "env-part", "GPUACCEPT_NODES": "all"})
    assert settings.partition == "cli-part" and settings.sources["partition"] == "--partition (command line)"
    assert settings.nodes == "all" and settings.sources["nodes"] == "GPUACCEPT_NODES (environment)"
    assert settings.qos == "high" and settings.sources["qos"].startswith("ini gpuaccept_qos")
    assert settings.probe_timeout == TimeoutRule() and settings.sources["probe_timeout"] == "default"


def test_repeatable_and_lists():
    settings = resolve(FakeConfig(cli={"srun_arg": ["--mpi=none", "--cpu-bind=cores"], "nodelist": "a, b"}), {})
    assert settings.srun_arg == ("--mpi=none", "--cpu-bind=cores")
    assert settings.nodelist == ("a", "b")


@pytest.mark.parametrize(
    ("cli", "env", "ini", "expected"),
    [
        ({"probe_timeout": "soon"}, {}, {}, "--probe-timeout (command line): 'soon'"),
        ({}, {"GPUACCEPT_NODES": "0"}, {}, "GPUACCEPT_NODES (environment): '0'"),
        ({}, {}, {"launcher": "kubernetes"}, "ini gpuaccept_launcher (/etc/pytest.ini): 'kubernetes'"),
        ({}, {"GPUACCEPT_NCCL_MAX_BYTES": "8Q"}, {}, "GPUACCEPT_NCCL_MAX_BYTES (environment): '8Q'"),
        ({"nodelist": "n1,n2", "exclude": "n2"}, {}, {}, "both name n2"),
    ],
)
def test_bad_value_names_source(cli, env, ini, expected):
    with pytest.raises(SettingsError) as info:
        resolve(FakeConfig(cli=cli, ini=ini), env)
    assert expected in str(info.value), str(info.value)


def test_sizes():
    settings = resolve(FakeConfig(cli={"nccl_min_bytes": "512K", "nccl_max_bytes": "8GiB"}), {})
    assert settings.nccl_min_bytes == 512 * 1024 and settings.nccl_max_bytes == 8 << 30


def _drift(options: Iterable[Option], settings: type) -> list[str]:
    """Where the options (``OPTIONS``) and a settings dataclass (``Settings``) disagree: an option with no
    field, a field with no option (``sources`` is resolve's bookkeeping, not an option), or two defaults.
    ``resolve`` fills a field from its option's default, so a field's own default differing from it is
    a second, silent answer to "what is the default" (what ``Settings()`` in a test would get)."""
    fields = {f.name: f for f in dataclasses.fields(settings) if f.name != "sources"}
    by_name = {opt.name: opt for opt in options}
    wrong = [f"option {n} has no Settings field" for n in sorted(by_name.keys() - fields.keys())]
    wrong += [f"Settings.{n} has no option in OPTIONS" for n in sorted(fields.keys() - by_name.keys())]
    for name in sorted(by_name.keys() & fields.keys()):
        field = fields[name]
        if field.default_factory is not dataclasses.MISSING:
            default: Any = field.default_factory()
        elif field.default is not dataclasses.MISSING:
            default = field.default
        else:
            continue  # the dataclass gives none: nothing to disagree with
        if default != by_name[name].default:
            wrong.append(f"{name}: OPTIONS says {by_name[name].default!r}, Settings says {default!r}")
    return wrong


def test_each_option_is_declared_once():
    """``OPTIONS`` (how an option is read) and ``Settings`` (its typed value) name the same options with the
    same defaults. Two lists, since a dataclass built from ``OPTIONS`` would lose the field types mypy
    checks every use of a setting with; this test keeps them one declaration in effect."""
    assert not (wrong := _drift(OPTIONS, Settings)), "\n".join(wrong)


def test_the_drift_check_catches_drift():
    @dataclasses.dataclass(frozen=True)
    class Drifted:
        launcher: str = "slurm"
        partition: str | None = None
        extra: int = 0
        sources: dict[str, str] = dataclasses.field(default_factory=dict)

    options = (Option("launcher", "", str, "auto"), Option("partition", ""), Option("nodes", "", int, 1))
    assert _drift(options, Drifted) == [
        "option nodes has no Settings field",
        "Settings.extra has no option in OPTIONS",
        "launcher: OPTIONS says 'auto', Settings says 'slurm'",
    ]
