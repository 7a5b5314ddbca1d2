"""What the neighbours probe emits (VMAAS03): each GPU's figures with its half of the node alone, then with the
other half busy at the same time, so a judge can tell whether two tenants on one node slow each other.

Pydantic models, frozen and closed (``extra="forbid"``), as ``gpuaccept.contracts.tenant``: a renamed field is a
``PayloadError`` where the result arrives, never a ``KeyError`` in the judge. A figure the probe could not take is
None, never a made-up value; the ratio is computed here, once, so the probe and the judge cannot disagree on it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["FIGURES", "UNITS", "BusyGpu", "Figure", "NeighbourGpu", "NeighbourProcess", "NeighboursRecord", "ratio_pct"]

#: the figures each GPU is measured by: bf16 matmul TFLOP/s, HBM device-copy TB/s, pinned host-to-device GB/s
Figure = Literal["matmul", "hbm", "h2d"]
FIGURES: tuple[Figure, ...] = ("matmul", "hbm", "h2d")


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def ratio_pct(solo: float | None, together: float | None) -> float | None:
    """``together`` as a percentage of ``solo`` (100 = the neighbour cost nothing); None where either is missing."""
    if solo is None or together is None or solo <= 0:
        return None
    return round(together / solo * 100, 2)


class NeighbourProcess(_Payload):
    """A process found on a GPU before a child touched CUDA (NVML's view): someone else's work."""

    pid: int
    name: str | None  # null where NVML names no process
    used_mib: float | None  # null where NVML gives no figure (NVML_VALUE_NOT_AVAILABLE)


class BusyGpu(_Payload):
    """A GPU others' processes used while a phase measured it: its figures measured the sharing."""

    gpu: int
    pci_bus_id: str | None
    phase: Literal["solo", "together"]
    processes: list[NeighbourProcess]


class NeighbourGpu(_Payload):
    """One GPU: which half it is in, and per figure its median alone (``solo``), beside the other half
    (``together``), and the ratio in percent. Keys of the dicts are ``FIGURES``."""

    index: int
    uuid: str | None  # NVML's identity; null where a half had no NVML
    pci_bus_id: str | None
    name: str | None
    half: Literal["A", "B"]
    solo: dict[Figure, float | None]
    together: dict[Figure, float | None]
    ratio_pct: dict[Figure, float | None]


#: each figure's unit, as the record says it
UNITS: dict[Figure, str] = {"matmul": "TFLOP/s", "hbm": "TB/s", "h2d": "GB/s"}


class NeighboursRecord(_Payload):
    """The node's two halves (GPU indices as NVML numbers them), each GPU's figures, and how long each timed
    window ran. ``why`` says why no GPU was measured (fewer than two GPUs, no CUDA); ``gpus`` is then empty."""

    seconds: float
    halves: dict[Literal["A", "B"], list[int]]
    gpus: list[NeighbourGpu]
    busy: list[BusyGpu]
    units: dict[Figure, str]
    why: str | None
