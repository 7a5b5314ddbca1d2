"""What differs between the Slurm versions clusters run (22.05 to 26.05), in one place.

The dispatcher reads Slurm through the text formats of ``sinfo -o``, ``squeue -o`` and ``scontrol``,
which read the same on every version the selftests hold recorded outputs of
(``fixtures/slurm/<version>/``). It does not read ``--json``: the schema's ``data_parser`` changes with
every release (v0.0.38 on 22.05, v0.0.42 on 24.11, v0.0.45 on 26.05) and 22.05's ``sinfo --json``
ignores ``-p``/``-n`` and lists every node. What does change for an ``srun`` dispatcher, from SchedMD's
release notes:

- 23.02: a down reason Slurm sets itself (``Not responding``) is appended to the reason already there
  after ``:`` instead of replacing it, so readers of the Reason field match substrings, not whole
  values (``preflight.NodeRow.describe``, ``gpuaccept-undrain``);
- 23.11: ``srun --uid/--gid`` removed;
- 24.11: ``srun --cpu-bind=rank`` is ignored ("Rank binding is obsolete") and the step runs unbound;
  ``--gpus-per-task`` implies ``--tres-bind=gres/gpu:per_task:N`` (before, ``--gpu-bind=per_task:N``:
  every task is given its own GPUs on both, seen on 22.05, 24.11 and 26.05);
- 24.05: ``CgroupPlugin=disabled`` (the loopback cluster's cgroup.conf, in ``slurm/dev-cluster/up.sh``).

The one check that needs the version at run time is an ``--srun-arg`` the cluster's srun no longer
honours: it would fail every step, or run every step without the binding asked for, so it is refused
before the allocation, naming the option, the version and what to use instead.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gpuaccept.dispatch.slurm_cli import SlurmError, slurm_cmd

__all__ = ["RemovedOption", "SlurmVersion", "detect", "parse_version", "removed_srun_options"]


@dataclass(frozen=True, order=True)
class SlurmVersion:
    """A Slurm release: ``24.11.5`` -> (24, 11, 5). Ordered, so ``v >= SlurmVersion(24, 11)`` reads."""

    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.patch}"


_VERSION = re.compile(r"\b(\d{2})\.(\d{2})(?:\.(\d+))?")


def parse_version(text: str) -> SlurmVersion:
    """``slurm 24.11.5``, ``slurm-wlm 22.05.8`` or ``slurm 23.02.7-1`` -> the version; else ``SlurmError``."""
    match = _VERSION.search(text)
    if not match:
        raise SlurmError(f"cannot read a Slurm version from {text.strip()!r}")
    return SlurmVersion(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


@functools.cache
def detect() -> SlurmVersion:
    """The version of the Slurm client on PATH (``sinfo --version``; it reads slurm.conf first)."""
    return parse_version(slurm_cmd(["sinfo", "--version"], timeout_s=15))


@dataclass(frozen=True)
class RemovedOption:
    """An srun option a release stopped honouring: ``pattern`` matches the argument as given."""

    pattern: re.Pattern[str]
    since: SlurmVersion
    effect: str  # what srun of that release does with it
    instead: str

    def message(self, argument: str, version: SlurmVersion) -> str:
        return (
            f"--srun-arg {argument}: this cluster's srun is Slurm {version}, and from Slurm {self.since.major}."
            f"{self.since.minor:02d} on {self.effect}; {self.instead}"
        )


REMOVED_SRUN_OPTIONS = (
    RemovedOption(
        re.compile(r"^--cpu-bind=(.*,)?rank(,.*)?$"),
        SlurmVersion(24, 11),
        "srun ignores it ('Rank binding is obsolete') and the steps would run unbound",
        "bind with --cpu-bind=cores, or map_cpu:<list> for a fixed order",
    ),
    RemovedOption(
        re.compile(r"^--(uid|gid)(=.*)?$"),
        SlurmVersion(23, 11),
        "srun has no such option and every step would fail",
        "run the suite as that user instead",
    ),
)


def removed_srun_options(args: tuple[str, ...] | list[str], version: SlurmVersion) -> list[str]:
    """One message per argument that ``version``'s srun no longer takes (empty: all are fine)."""
    return [
        option.message(arg, version)
        for arg in args
        for option in REMOVED_SRUN_OPTIONS
        if version >= option.since and option.pattern.match(arg)
    ]
