"""Settings resolve in one order (command line > environment > ini) and bad values name their source."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.settings import OPTIONS, Settings, SettingsError, resolve
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


def test_each_option_is_declared_once():
    """Each option is one ``Settings`` field (its type, default, help and parser together); ``OPTIONS`` is
    read off those fields, in their order, and every field but resolve's bookkeeping (``sources``) is one."""
    fields = [f.name for f in dataclasses.fields(Settings) if f.name != "sources"]
    assert [opt.name for opt in OPTIONS] == fields
    defaults = Settings()
    assert all(getattr(defaults, opt.name) == opt.default for opt in OPTIONS)
    assert all(opt.help for opt in OPTIONS)
