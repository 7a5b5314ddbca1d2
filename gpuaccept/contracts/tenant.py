"""What the tenant-safety probes emit (issue 49): GPU memory residue between jobs, the node's root of trust,
the site's health agents, and the software versions held to NVIDIA's security bulletins.

Pydantic models, frozen and closed (``extra="forbid"``): a probe dumps one with ``model_dump(mode="json")``,
and ``ProbeSpec.read`` hands the judge the same model back, so a renamed or missing field is a
``PayloadError`` naming the probe and field where the result arrives, never a ``KeyError`` in a judge.
A reading the probe could not take is None (with a ``why`` where one helps), never a made-up value. Every field of
the trust, agent and software payloads is required (issue 55): a probe that leaves one out is refused naming it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "AgentRecord",
    "AgentState",
    "GpuSoftware",
    "ResidueGpu",
    "ResidueRecord",
    "SoftwareRecord",
    "TopValue",
    "TrustRecord",
]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---- SEC21: GPU memory left between jobs (probes/residue.py) ---------------------------------------------


class TopValue(_Payload):
    """One non-zero 64-bit word value the scan saw often, in hex, with how many sampled words held it."""

    value: str
    words: int


class ResidueGpu(_Payload):
    """One GPU's fill or scan: its identity, what was covered and (for a scan) what was found. Every key is written;
    what a mode does not read is ``null`` (a fill writes no scan figures: its memory holds the pattern it wrote)."""

    index: int
    uuid: str | None  # NVML's; null where NVML did not answer
    pci_bus_id: str | None
    name: str
    total_bytes: int
    free_bytes: int  # cudaMemGetInfo's free memory before the probe allocated
    bytes: int  # bytes filled (fill) or scanned (scan, plant)
    #: scan and plant: bytes in words equal to this run's pattern at their offset in a 4 KiB page
    pattern_bytes: int | None
    tag_bytes: int | None  # bytes in words whose high 32 bits are this run's tag (looser; random data hits 2**-32)
    nonzero_bytes: int | None  # non-zero bytes anywhere in the scanned memory
    top_values: list[TopValue] | None  # the commonest non-zero words of a strided sample
    sampled_words: int | None  # how many words that sample held
    seconds: float
    #: fill: what the allocation held before the pattern went in, i.e. what the GPU's previous job left
    inherited_nonzero_bytes: int | None
    inherited_top_values: list[TopValue] | None
    #: scan with ``--plant-seed``: the scanner's proof in the same process (the planted pattern's bytes found)
    proof_bytes: int | None
    proof_pattern_bytes: int | None


class ResidueRecord(_Payload):
    """A residue step on one node: ``fill`` (read what the previous job left, write the pattern, exit), ``scan``
    (read fresh memory uninitialised; with a plant seed, then the scanner's proof) or ``plant`` (fill, free, scan
    in one process: the scanner's proof alone)."""

    mode: Literal["fill", "scan", "plant"]
    seed: int
    tag: str  # the pattern's high 32 bits, hex: what an operator greps a dump for
    cuda: bool
    why: str | None  # why no GPU was measured (no CUDA, no torch)
    gpus: list[ResidueGpu]


# ---- SEC22: root of trust (probes/trust.py) ----------------------------------------------------------------


class TrustRecord(_Payload):
    """The node's boot chain as sysfs shows it. ``secure_boot``/``setup_mode`` are None where there is no
    UEFI or the efivar is unreadable; ``tpm_version`` is the major version (1 or 2) or None."""

    uefi: bool
    secure_boot: bool | None
    setup_mode: bool | None
    tpm_present: bool
    tpm_version: int | None
    tpm_devices: list[str]
    notes: list[str]  # what could not be read, and why


# ---- BFX04: health agents (probes/agent.py) ----------------------------------------------------------------


class AgentState(_Payload):
    """One declared agent on one node: its process, its URL, and for a DCGM exporter the GPUs its metrics
    page lists (indices and UUIDs from the ``gpu=``/``UUID=`` labels of ``DCGM_FI_DEV_*`` series)."""

    name: str
    kind: str
    process: str | None
    running: bool | None  # None: no process name declared
    pids: list[int]
    url: str | None
    answered: bool | None  # None: no URL declared
    http_status: int | None
    error: str | None
    exporter_gpus: list[str] | None  # None: not an exporter, or its page was not read
    exporter_uuids: list[str] | None


class AgentRecord(_Payload):
    """The node's agents, the GPUs NVML sees (what an exporter must list), and DCGM's versions."""

    agents: list[AgentState]
    nvml_gpus: int | None
    nvml_uuids: list[str]
    dcgm_version: str | None


# ---- VMAAS07 / CNP09 / ATTEST01: software versions (probes/software.py) ------------------------------------


class GpuSoftware(_Payload):
    """One GPU's firmware as NVML reports it."""

    index: int
    uuid: str | None
    pci_bus_id: str | None
    vbios: str | None


class SoftwareRecord(_Payload):
    """What a node runs, each field as read or None where it is not there (no DCGM, no NVML)."""

    driver: str | None
    cuda_driver: str | None
    kernel: str | None
    os_id: str | None
    os_version_id: str | None
    dcgm: str | None
    dcgm_exporter: str | None
    gpus: list[GpuSoftware]
