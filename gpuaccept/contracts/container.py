"""What the ``container`` probe hands back: the image and interpreter a node's steps run in.

The launcher starts it inside the image on every node before the first test (``dispatch/slurm.start_container``)
and keeps each node's answer on the run record: the proof that the image asked for is the one that measured.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = ["ContainerPayload", "Where"]


@strict
class Where(TypedDict):
    """``probes._where.where()``: a reading a process may not have is ``None`` (no marker file, no runtime trace)."""

    #: the image's marker name (``/etc/gpuaccept-image.json``), None in an image without one
    image: str | None
    #: ``/etc/os-release``'s PRETTY_NAME, None where it is unreadable
    os: str | None
    #: the runtime whose traces the process finds (``oci``, ``enroot``, ``docker``, ``podman``); None on the host
    runtime: str | None
    #: ``"3.11.2 /usr/bin/python3"``: the version and path of the interpreter that runs the suite
    python: str


@strict
class ContainerPayload(TypedDict):
    where: Where
