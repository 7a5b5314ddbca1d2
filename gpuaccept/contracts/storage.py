"""What the storage throughput and checkpoint probes hand back (``probes/fio.py``, ``probes/checkpoint.py``).

pydantic models, validated where a step's result arrives (``probes/specs.py``): a probe that leaves a field
out or mistypes it is an ERROR naming the probe, node, rank and field, before any judge reads it. No field has a
default (issue 55): one a phase does not fill is written null.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CheckpointFile", "CheckpointPayload", "FioPayload", "FioRun", "PathProblem"]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PathProblem(_Payload):
    """Why a declared path cannot be measured on this node: missing, not a directory, read-only, full, or an I/O
    on it that stalled past the stall limit (``what`` names the operation)."""

    kind: Literal["missing", "not a directory", "read-only", "full", "stalled", "unwritable", "files missing"]
    detail: str


class FioRun(_Payload):
    """One fio job group on one node: what it moved, how fast, and how the bytes were kept out of caches.

    ``gbps``: ``bytes`` over fio's own runtime of the group (10^9 bytes per second, as storage datasheets
    count); ``wall_s``: the fio process's whole wall time, start-up and the final fsync included.
    """

    rw: Literal["write", "read"]
    #: ``fio --version`` of the binary that ran it, on the record beside its figure
    fio: str
    bytes: int = Field(ge=0)
    runtime_s: float = Field(ge=0)
    wall_s: float = Field(ge=0)
    gbps: float = Field(ge=0)
    jobs: int = Field(gt=0)
    block_kib: int = Field(gt=0)
    direct: bool
    fsync: bool
    #: how the read avoided this node's page cache: "direct I/O" or "page cache dropped (fadvise)" (with
    #: ``written_by``: "written by node2", the files of another node)
    cache: str
    written_by: str
    command: list[str]


class FioPayload(_Payload):
    """A node's throughput phase: fio's version (None: fio is not installed there) and its run, or the path's
    problem."""

    path: str
    fio: str | None
    run: FioRun | None  # None: the path's problem, or fio not installed (``fio`` None), or the clean-up
    problem: PathProblem | None


class CheckpointFile(_Payload):
    name: str
    bytes: int = Field(ge=0)
    sha256: str


class CheckpointPayload(_Payload):
    """A checkpoint saved the way a fine-tune saves one, or restored the way a job's cold start reads one.

    ``save``: torch's optimizer and adapter state and the model's safetensors shards written and fsynced;
    ``restore``: every file read back, the shards loaded into the GPU's memory (``device``), every file hashed
    against the manifest the saver wrote; ``gbps`` is bytes over the writes and fsyncs (save) or the reads (restore)
    alone (10^9 bytes/s): hashing runs at a core's speed, not the filesystem's, and is left out of both.
    """

    mode: Literal["save", "restore", "clean"]
    path: str
    bytes: int = Field(ge=0)
    seconds: float = Field(ge=0)
    gbps: float = Field(ge=0)
    files: list[CheckpointFile]
    #: restore: the files whose bytes differ from the manifest (name: what differs)
    mismatched: dict[str, str]
    #: restore: how this node's page cache was kept out: "written by node2", "page cache dropped (fadvise)"
    #: (None: not a restore)
    cache: str | None
    #: restore: where the weights were loaded ("cuda:0", "cpu") and how long from the first byte read to
    #: the last tensor in that memory: the cold start of a job that loads this checkpoint
    device: str | None
    load_s: float | None
    problem: PathProblem | None
