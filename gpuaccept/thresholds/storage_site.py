"""What a site declares of its filesystems, and the storage contracts they are held to (``storage:`` in a
thresholds file).

A GPU node is only as fast as the storage its jobs checkpoint to and cold-start from, and nothing about a
node says which filesystems matter or what they were bought to deliver: the site says it. Each filesystem
names its path, whether every node sees the same one (``shared``) or each has its own (``local``: node-local
NVMe scratch), its role, and its contract, either a named preset (``contract: superpod-h100-better``) or its
own figures. The packaged thresholds.yaml holds the presets, each with its public source; a site file may add
its own presets and declares the filesystems. A filesystem nobody declared is not measured, and its tests skip
naming the key (``storage.filesystems``), as InfiniBand's do when a site declares none.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpuaccept.timelimits import STALL_S

__all__ = [
    "Aggregate",
    "Contract",
    "Filesystem",
    "MountExpect",
    "Sizes",
    "StorageSection",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Aggregate(_Strict):
    """What ``nodes`` nodes reading or writing at once get together (the SuperPOD table's "per 32 nodes")."""

    nodes: int = Field(gt=0)
    read_gbps: float | None = Field(default=None, gt=0)
    write_gbps: float | None = Field(default=None, gt=0)


class Contract(_Strict):
    """The figures a filesystem was bought to deliver, and where they come from (``source``).

    GB/s are 10^9 bytes per second, as storage datasheets and the SuperPOD reference architecture count them.
    ``metadata_ops``: creates, stats and deletes per second of one node (IO500 mdtest counts them so);
    ``coherency_s``: how long a change on one node may take to be seen on another.
    """

    source: str = Field(min_length=3)
    read_gbps: float = Field(gt=0)
    write_gbps: float = Field(gt=0)
    aggregate: Aggregate | None = None
    metadata_ops: float | None = Field(default=None, gt=0)
    coherency_s: float | None = Field(default=None, gt=0)
    #: how far below the median of the nodes measured alone a node may be (percent; default the suite's
    #: ``straggler_pct``): a filesystem whose clients spread more when healthy says so here, with its measurement
    straggler_pct: float | None = Field(default=None, gt=0, lt=100)


class MountExpect(_Strict):
    """The mount every node must show for the filesystem (N-014 to N-018): each key given is compared."""

    type: str | None = None
    nfs_version: str | None = None
    nconnect: int | None = Field(default=None, gt=0)
    proto: str | None = None
    read_ahead_kb: int | None = Field(default=None, ge=0)
    modules: tuple[str, ...] = ()


class Sizes(_Strict):
    """How much a run moves (defaults fit the storage section's budget of 60 s per node at contract speed).

    ``jobs`` fio jobs per node, each writing then reading one file of ``file_mib``; ``meta_files`` files each
    rank creates, stats and deletes per shape; ``large_dir`` the entries of the directory listed whole
    (N-013a/b ask for 1,000,000 files and 500,000 subdirectories: a site that contracted them sets it);
    ``checkpoint_mib`` the checkpoint saved and restored; ``free_gib`` the space a declared path must have free;
    ``phase_max_s`` fio's runtime cap per phase: a filesystem too slow to move the files in it stops there and is
    judged on what it moved (4 phases a node: alone and together, write and read).
    """

    jobs: int = Field(default=4, gt=0, le=64)
    file_mib: int = Field(default=1024, gt=0)
    meta_files: int = Field(default=2000, gt=0)
    large_dir: int = Field(default=10000, gt=0)
    checkpoint_mib: int = Field(default=2048, gt=0)
    free_gib: float = Field(default=10.0, ge=0)
    phase_max_s: float = Field(default=15.0, gt=0)


class Filesystem(_Strict):
    """One declared filesystem: where jobs see it, whether nodes share it, what it is for, what it must do."""

    path: str = Field(min_length=1)
    scope: Literal["shared", "local"]
    role: Literal["checkpoints", "models", "datasets", "scratch"]
    #: a preset's name (``storage.presets``) or the site's own figures
    contract: str | Contract
    mount: MountExpect = MountExpect()
    sizes: Sizes = Sizes()
    #: ``direct`` I/O where the filesystem takes it (O_DIRECT), else buffered writes with fsync
    direct: bool = True
    #: the preset ``contract`` named, once the loader resolved it to its figures (None: the site's own figures)
    preset: str | None = None

    @model_validator(mode="after")
    def _absolute(self) -> Filesystem:
        if not self.path.startswith("/"):
            raise ValueError(f"path {self.path!r} must be absolute: it is the path every node's jobs see")
        return self


class StorageSection(_Strict):
    """``storage:``: the named contracts (presets) and the site's filesystems, and the stall limit."""

    presets: dict[str, Contract] = Field(default_factory=dict)
    filesystems: dict[str, Filesystem] = Field(default_factory=dict)
    stall_s: float = Field(default=STALL_S, gt=0)
