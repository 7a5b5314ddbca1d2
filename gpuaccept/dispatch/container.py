"""Every step inside an image: pyxis/enroot (``--container-image``) or Slurm's own OCI support
(``--container-bundle``, ``srun --container``, runc or crun as the cluster's ``oci.conf`` says).

What is checked before the first test, each failure a usage error (exit 4) that names the option, the
path or the node, with the runtime's own words:

* on the login node (``from_settings``): the two ways are not mixed; a local image file or bundle
  exists and a bundle is one Slurm can start (``config.json``, ``rootfs/``); every mount source exists;
* on every node, outside the image (``HOST_QUERY``): the same paths, and the runtimes' versions (the
  record and the fingerprints carry them: another version on one node is drift);
* on every node, inside the image (``gpuaccept.probes.container``): the image starts and its Python
  imports the suite. Under pyxis this step also imports the image, once per node, into a container
  named for the job that every later step reuses (a ``docker://`` URI is pulled once, not per step).

Some probes need the host, not an image (their spec's ``host_side``, ``gpuaccept.probes.specs``): they run
outside it, with the host's Python, and where a node has no suite outside the image they are declared not
run, never an error.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuaccept.dispatch.preflight import SlurmUnusable
from gpuaccept.settings import Settings

__all__ = [
    "HOST_QUERY",
    "Container",
    "ContainerUnusable",
    "from_settings",
    "parse_host_lines",
    "runtime_versions",
]

#: the pyxis container every step of the job reuses, ``gpuaccept_<job>``: imported once per node by the
#: start check; named for the job, so a later run never finds an earlier run's (older) image under it
PYXIS_NAME = "gpuaccept_{job}"

#: one line per node, outside the image: the runtimes' versions, the paths a node lacks, and whether the
#: host's Python (the one host-side probes run with, ``$1``) imports the suite. Plain sh: many GPU nodes
#: have no Python outside their images, and that must be reported, not crash the query.
HOST_QUERY = r"""
v() { "$@" 2>/dev/null | head -n 1 | tr '\t' ' '; }
py=$1; shift
missing=""
for p in "$@"; do [ -e "$p" ] || missing="$missing${missing:+,}$p"; done
pyxis=""
conf=$(scontrol show config 2>/dev/null | awk -F'= ' '/^PlugStackConfig/ {print $2}')
for f in ${conf:-/etc/slurm/plugstack.conf} $(ls "${conf%/*}"/plugstack.conf.d/* 2>/dev/null); do
  [ -r "$f" ] && pyxis=${pyxis:-$(awk '!/^#/ && /spank_pyxis/ {print $2; exit}' "$f")}
done
# pyxis has no version of its own to print: its plugin's path names it. slurmstepd runs enroot from its
# own PATH, which may not be the tasks': else the enroot installed beside the plugin (PREFIX/bin).
enroot=$(command -v enroot || echo "${pyxis%/lib/*}/bin/enroot")
hostpy=no
"$py" -c 'import gpuaccept' 2>/dev/null && hostpy=yes
printf 'GPUACCEPT_HOST\t%s\trunc=%s\tcrun=%s\tenroot=%s\tpyxis=%s\tmissing=%s\thost_python=%s\n' \
  "${SLURMD_NODENAME:-$(hostname)}" "$(v runc --version)" "$(v crun --version)" "$(v "$enroot" version)" \
  "$pyxis" "$missing" "$hostpy"
"""


class ContainerUnusable(SlurmUnusable):  # type: ignore[misc]  # final in typing; pytest maps it to exit 4
    """The image, bundle or mounts cannot be used: a usage error (exit 4) before any test."""


@dataclass(frozen=True)
class Container:
    """The image every step runs in, and how srun is asked for it."""

    kind: str  # "pyxis" (enroot image or URI) or "oci" (an OCI bundle folder)
    image: str
    mounts: str | None = None

    @property
    def option(self) -> str:
        return "--container-bundle" if self.kind == "oci" else "--container-image"

    def srun_args(self, job: str) -> list[str]:
        if self.kind == "oci":
            return [f"--container={self.image}"]
        args = [f"--container-image={self.image}", f"--container-name={PYXIS_NAME.format(job=job)}"]
        return args + ([f"--container-mounts={self.mounts}"] if self.mounts else [])

    @property
    def local(self) -> bool:
        """A file or bundle on a path, not a registry image that pyxis pulls."""
        return _is_local(self.image)

    def mount_sources(self) -> list[str]:
        """The host paths the image gets: a bundle's bind mounts, or ``--container-mounts``' sources."""
        if self.kind == "oci":
            return _bundle_mount_sources(Path(self.image))
        return [m.split(":")[0] for m in (self.mounts or "").split(",") if m.strip()]

    def local_paths(self) -> list[str]:
        """The paths every node must have: a local image or bundle, and each mount's source."""
        return ([self.image] if self.local else []) + self.mount_sources()

    def describe(self) -> dict[str, Any]:
        """The image as the record names it: path or URI, and size and mtime of a local one (not a hash
        of a 20 GB file); a bundle also gives its config.json's sha256, which holds its mounts."""
        out: dict[str, Any] = {"kind": self.kind, "image": self.image, "mounts": self.mounts}
        path = Path(self.image)
        if self.local and path.exists():
            stat = path.stat()
            mtime = datetime.datetime.fromtimestamp(stat.st_mtime, datetime.timezone.utc)
            out["mtime"] = mtime.isoformat(timespec="seconds")
            if path.is_file():
                out["size_bytes"] = stat.st_size
            else:
                config = path / "config.json"
                out["config_sha256"] = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
        return out


def _is_local(image: str) -> bool:
    """A file or folder path, as pyxis tells one from a registry image (``docker://...``, ``ubuntu:24.04``,
    ``nvcr.io#nvidia/pytorch:24.05-py3``): it begins with ``/`` or ``.``."""
    return image.startswith(("/", "."))


def _bundle_mount_sources(bundle: Path) -> list[str]:
    try:
        config = json.loads((bundle / "config.json").read_text())
    except (OSError, ValueError):
        return []
    return [
        str(m["source"])
        for m in config.get("mounts") or []
        if isinstance(m, dict) and m.get("type") == "bind" and str(m.get("source", "")).startswith("/")
    ]


def _check_bundle(bundle: Path) -> None:
    """A folder Slurm can start: Slurm 22.05 takes the root from BUNDLE/rootfs whatever config.json says,
    and runc refuses a symlink there."""
    where = f"--container-bundle {bundle}"
    if not bundle.is_dir():
        raise ContainerUnusable(f"{where}: no such folder (an OCI bundle: config.json and rootfs/)")
    try:
        config = json.loads((bundle / "config.json").read_text())
    except OSError as exc:
        raise ContainerUnusable(f"{where}: cannot read config.json: {exc.strerror}") from None
    except ValueError as exc:
        raise ContainerUnusable(f"{where}: config.json is not JSON: {exc}") from None
    if not isinstance(config, dict) or not isinstance(config.get("process"), dict):
        raise ContainerUnusable(f"{where}: config.json has no 'process' (not an OCI runtime spec)")
    rootfs = bundle / "rootfs"
    if rootfs.is_symlink() or not rootfs.is_dir():
        raise ContainerUnusable(f"{where}: rootfs/ must be a folder, not a link (Slurm starts BUNDLE/rootfs)")


def from_settings(settings: Settings) -> Container | None:
    """The container the options ask for, checked on this host; None when steps run on the host."""
    image, bundle, mounts = settings.container_image, settings.container_bundle, settings.container_mounts
    if image and bundle:
        raise ContainerUnusable("--container-image (pyxis) and --container-bundle (OCI) exclude each other")
    if mounts and not image:
        raise ContainerUnusable(
            "--container-mounts is pyxis's (with --container-image); an OCI bundle's mounts are in its config.json"
        )
    if bundle:
        _check_bundle(Path(bundle))
        container = Container("oci", str(Path(bundle).resolve()))
    elif image:
        if _is_local(image) and not Path(image).is_file():
            raise ContainerUnusable(f"--container-image {image}: no such file (a squashfs image, or a docker:// URI)")
        if not _is_local(image) and Path(image).is_file():
            raise ContainerUnusable(f"--container-image {image}: pyxis reads this as a registry image; write ./{image}")
        container = Container("pyxis", str(Path(image).resolve()) if _is_local(image) else image, mounts)
    else:
        return None
    for path in container.mount_sources():
        if not os.path.exists(path):
            raise ContainerUnusable(f"{container.option} {container.image}: mount source {path} does not exist")
    return container


_HOST_LINE = re.compile(r"GPUACCEPT_HOST\t(?P<node>[^\t]+)\t(?P<rest>.*)")


def parse_host_lines(stdout: str) -> dict[str, dict[str, str]]:
    """``HOST_QUERY``'s lines: node -> {runc, crun, enroot, pyxis, missing, host_python}."""
    found: dict[str, dict[str, str]] = {}
    for line in stdout.splitlines():
        match = _HOST_LINE.search(line)
        if match:
            fields = dict(part.split("=", 1) for part in match["rest"].split("\t") if "=" in part)
            found[match["node"]] = fields
    return found


def runtime_versions(fields: dict[str, str], kind: str) -> str:
    """One comparable string of the runtimes a node would start images with (drift when nodes differ)."""
    names = ("runc", "crun") if kind == "oci" else ("enroot", "pyxis")
    return "; ".join(f"{name}: {fields.get(name) or 'absent'}" for name in names)
