"""Every gpuaccept setting, resolved in one place and one order: command line > environment > ini.

Modelled on pytest-timeout's single ``get_env``/``_get_timeout`` resolution: each option is declared
once in ``OPTIONS`` (flag, environment variable, ini key, parser), ``add_options`` registers them with
pytest, and ``resolve`` walks the three sources in order. A bad value raises ``SettingsError`` naming
the source it came from (``--probe-timeout (command line)``, ``GPUACCEPT_NODES (environment)``, ``ini
gpuaccept_partition``) so an operator knows which file or variable to fix.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest

from gpuaccept.timelimits import TimeoutRule
from gpuaccept.units import parse_bytes as _size

__all__ = [
    "OPTIONS",
    "Option",
    "Settings",
    "SettingsError",
    "acceptance_selected",
    "add_options",
    "asked",
    "reports_root",
    "resolve",
]


class SettingsError(pytest.UsageError):  # type: ignore[misc]  # final in typing; pytest maps it to exit 4
    """A setting's value is unusable; the message names where it came from."""


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _timeout_rule(text: str) -> TimeoutRule:
    try:
        return TimeoutRule.parse(text)
    except ValueError as exc:
        raise ValueError(f"expected seconds (a cap), x<factor> (a scale) or both as 'x2,900': {exc}") from None


def _nodes(text: str) -> int | str:
    if text == "all":
        return "all"
    value = int(text)
    if value < 1:
        raise ValueError("must be a positive integer or 'all'")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _drain(text: str) -> str:
    if text not in ("off", "print", "yes"):
        raise ValueError("must be off, print (show the scontrol command) or yes (really drain)")
    return text


def _launcher(text: str) -> str:
    if text not in ("auto", "slurm", "local"):
        raise ValueError("must be one of auto, slurm, local")
    return text


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class Option:
    """One setting: where it can come from and how its text becomes a value."""

    name: str
    help: str
    parse: Callable[[str], Any] = str
    default: Any = None
    repeatable: bool = False
    flag_only: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "GPUACCEPT_" + self.name.upper()

    @property
    def ini(self) -> str:
        return "gpuaccept_" + self.name


def _option(
    help: str,
    parse: Callable[[str], Any] = str,
    default: Any = None,
    *,
    repeatable: bool = False,
    flag_only: bool = False,
) -> Any:
    """A ``Settings`` field that is an option: its default, and how ``Option`` reads it from the command
    line, the environment and the ini file (kept in the field's metadata)."""
    spec = {"help": help, "parse": parse, "repeatable": repeatable, "flag_only": flag_only}
    return field(default=default, metadata={"option": spec})


@dataclass(frozen=True)
class Settings:
    """The resolved settings of one pytest session. Each field is declared once, as an option
    (``_option``: its help, how its text becomes a value, its default); ``OPTIONS`` is read off the fields,
    so a setting cannot exist in one list and not the other, and mypy still sees every field's type."""

    launcher: str = _option("where probes run: slurm (srun), local (subprocesses) or auto", _launcher, "auto")
    partition: str | None = _option("Slurm partition to allocate from (default: the cluster's default)")
    nodes: int | str = _option("number of nodes to allocate, or 'all' idle nodes of the partition", _nodes, 1)
    nodelist: tuple[str, ...] = _option("comma-separated nodes to test (Slurm -w)", _csv, ())
    exclude: tuple[str, ...] = _option("comma-separated nodes to leave out (Slurm -x)", _csv, ())
    gpus_per_node: int | None = _option("GPUs each node must have (default: what Slurm declares)", _non_negative_int)
    account: str | None = _option("Slurm account for the allocation")
    qos: str | None = _option("Slurm QOS for the allocation")
    reservation: str | None = _option("Slurm reservation for the allocation")
    time_limit: str = _option("allocation time limit in Slurm's format (e.g. 30, 1:00:00)", str, "60")
    alloc_wait: float = _option(
        "seconds to wait for the allocation (Slurm's pending reason is printed meanwhile) before cancelling it",
        _positive_float,
        60.0,
    )
    srun_arg: tuple[str, ...] = _option("extra argument passed to every srun (repeatable)", str, (), repeatable=True)
    thresholds: Path | None = _option("site thresholds YAML merged over the packaged defaults", Path)
    sku: str | None = _option("force this SKU from thresholds.yaml instead of detecting it from NVML")
    probe_timeout: TimeoutRule = _option(
        "every probe step's declared time limit scaled (x1.5) and/or capped in seconds (600), e.g. 'x2,900'",
        _timeout_rule,
        TimeoutRule(),
    )
    run_record: Path | None = _option(
        "path of the run record JSON (default reports/runs/<UTC start>[-job<id>].json)", Path
    )
    sign_key: Path | None = _option(
        "the operator's Ed25519 private key (OpenSSH or PEM PKCS#8): signs the run record and the summary, "
        "<file>.sig beside each (gpuaccept-verify checks them)",
        Path,
    )
    sharedfs_path: Path | None = _option(
        "folder on the shared filesystem to test (default: reports/.sharedfs beside the ini file, else in the "
        "start folder)",
        Path,
    )
    dry_run: bool = _option("print every test's exact srun command instead of running it", _bool, False, flag_only=True)
    calibrate: bool = _option(
        "calibration run (what gpuaccept-calibrate runs): a figure the SKU has no limit for is measured and "
        "recorded, neither an error nor a pass",
        _bool,
        False,
        flag_only=True,
    )
    calibrate_metric: tuple[str, ...] = _option(
        "with --calibrate: also set aside the limits of metrics matching this glob, to measure a site's own "
        "floor (a site fabric; repeatable)",
        str,
        (),
        repeatable=True,
    )
    # GPU hardware
    burn_in: float = _option("seconds of sustained matmul per GPU (0 = no burn-in test)", _non_negative_float, 0.0)
    # NCCL
    nccl_tests_dir: Path | None = _option(
        "folder holding nccl-tests binaries (all_reduce_perf, ...) to run beside ours", Path
    )
    nccl_min_bytes: int = _option("smallest message of the NCCL sweep (bytes)", _size, 1 << 20)
    nccl_max_bytes: int = _option("largest message of the NCCL sweep (bytes; capped by free memory)", _size, 8 << 30)
    nccl_ring: bool = _option(
        "force NCCL_ALGO=Ring on the intra-node sweep too (multi-node passes always run Ring)", _bool, False
    )
    # training
    model_path: Path | None = _option(
        "local Hugging Face checkpoint to fine-tune instead of the tiny built-in Qwen2", Path
    )
    dataset: Path | None = _option("JSONL of chat messages to fine-tune on instead of the built-in dataset", Path)
    # reports and fleet
    baseline: str | None = _option("run record to compare with ('latest' or a path): regressions fail", str)
    drain_on_fail: str = _option("drain nodes with hardware failures: 'print' (dry run) or 'yes'", _drain, "off")
    container_image: str | None = _option(
        "pyxis/enroot image every srun step runs in: a squashfs file or a docker:// URI (srun --container-image)"
    )
    container_mounts: str | None = _option("pyxis mounts for every step, SRC:DST[:FLAGS],... (srun --container-mounts)")
    container_bundle: str | None = _option(
        "OCI bundle (config.json and rootfs/) every srun step runs in, through Slurm's oci.conf runtime "
        "(srun --container)"
    )
    sources: dict[str, str] = field(default_factory=dict, compare=False)


#: every option, in the order of the ``Settings`` fields that declare them
OPTIONS: tuple[Option, ...] = tuple(
    Option(f.name, default=f.default, **f.metadata["option"]) for f in fields(Settings) if "option" in f.metadata
)


def add_options(parser: pytest.Parser) -> None:
    """Register every option as a command-line flag and an ini key."""
    group = parser.getgroup("gpuaccept", "GPU cluster acceptance")
    for opt in OPTIONS:
        env_note = "" if opt.flag_only else f" [env {opt.env}, ini {opt.ini}]"
        if opt.parse is _bool:
            group.addoption(
                opt.flag, action="store_true", default=None, dest=f"gpuaccept_{opt.name}", help=opt.help + env_note
            )
            if not opt.flag_only:
                parser.addini(opt.ini, opt.help, type="string", default=None)
            continue
        group.addoption(
            opt.flag,
            action="append" if opt.repeatable else "store",
            default=None,
            dest=f"gpuaccept_{opt.name}",
            help=opt.help + env_note,
        )
        # two literal calls, not one conditional expression: pytest >= 9.2 types ``addini(type=...)`` as a
        # type form, and mypy cannot read a conditional string there ([maybe-unrecognized-str-typeform])
        if opt.repeatable:
            parser.addini(opt.ini, opt.help, type="linelist", default=None)
        else:
            parser.addini(opt.ini, opt.help, type="string", default=None)


def reports_root(config: pytest.Config) -> Path:
    """Where ``reports/`` goes: the ini file's folder, else the folder the run started in. Not pytest's
    rootdir, which an option's value moves (``--thresholds /abs/site.yaml`` reads to pytest as a path)."""
    return Path(config.inipath).parent if config.inipath else Path(config.invocation_params.dir)


def asked(config: pytest.Config) -> bool:
    """Whether this session asks for gpuaccept at start: a gpuaccept option on the command line, a gpuaccept
    key in the ini file, or ``-m`` selecting ``acceptance``. The environment alone does not: a
    ``GPUACCEPT_*`` variable left in a shell must not take over another project's tests."""
    if any(config.getoption(f"gpuaccept_{opt.name}", default=None) not in (None, []) for opt in OPTIONS):
        return True
    if any(config.getini(opt.ini) not in (None, "", []) for opt in OPTIONS if not opt.flag_only):
        return True
    return acceptance_selected(config)


def acceptance_selected(config: pytest.Config) -> bool:
    """``-m`` selects the acceptance marker (``-m acceptance``, ``-m "acceptance and not training"``)."""
    expr = str(getattr(config.option, "markexpr", "") or "")
    return bool(re.search(r"\bacceptance\b", expr)) and not re.search(r"\bnot\s+acceptance\b", expr)


def _parse(opt: Option, raw: str, source: str) -> Any:
    try:
        return opt.parse(raw)
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{source}: {raw!r} is not a valid value for {opt.flag}: {exc}") from None


def resolve(config: pytest.Config, environ: dict[str, str] | None = None) -> Settings:
    """Walk command line, environment and ini for every option; first one set wins."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for opt in OPTIONS:
        cli = config.getoption(f"gpuaccept_{opt.name}", default=None)
        if cli not in (None, []):
            source = f"{opt.flag} (command line)"
            if opt.parse is _bool and isinstance(cli, bool):
                values[opt.name] = cli
            elif opt.repeatable:
                values[opt.name] = tuple(_parse(opt, item, source) for item in cli)
            else:
                values[opt.name] = _parse(opt, cli, source)
            sources[opt.name] = source
            continue
        if not opt.flag_only and env.get(opt.env, "") != "":
            source = f"{opt.env} (environment)"
            raw = env[opt.env]
            values[opt.name] = tuple(raw.split()) if opt.repeatable else _parse(opt, raw, source)
            sources[opt.name] = source
            continue
        ini = None if opt.flag_only else config.getini(opt.ini)
        if ini not in (None, "", []):
            source = f"ini {opt.ini} ({config.inipath or 'ini file'})"
            if opt.repeatable:
                values[opt.name] = tuple(_parse(opt, item, source) for item in ini)
            else:
                values[opt.name] = _parse(opt, str(ini), source)
            sources[opt.name] = source
            continue
        values[opt.name] = opt.default
        sources[opt.name] = "default"
    settings = Settings(**values, sources=sources)
    if settings.nodelist and settings.exclude and set(settings.nodelist) & set(settings.exclude):
        both = ", ".join(sorted(set(settings.nodelist) & set(settings.exclude)))
        raise SettingsError(
            f"{sources['nodelist']} and {sources['exclude']} both name {both}: a node cannot be tested and excluded"
        )
    if settings.nccl_min_bytes > settings.nccl_max_bytes:
        raise SettingsError(
            f"{sources['nccl_min_bytes']}: the smallest NCCL message ({settings.nccl_min_bytes} bytes) is larger than "
            f"the largest, {sources['nccl_max_bytes']} ({settings.nccl_max_bytes} bytes): the sweep would be empty"
        )
    return settings
