"""Neighbours that don't slow each other (VMAAS03), its one home: each GPU's figure beside the other half of the
node at work, as a share of the same GPU's figure alone (``gpuaccept/probes/neighbours.py`` measures both).

A ratio is judged against the SKU's limit (``neighbour_<figure>_ratio_pct``); a GPU below it FAILED names the
GPU, its half, the other half's GPUs and the figure (the check's subject, ``pair=``: what slowed what), with both
figures beside it. A healthy board's ratios are not 100: two GPUs behind one PCIe switch share its uplink, and
the node shares its power. So the limits come from healthy nodes measured (docs/measurements.md); until a
SKU has them the metrics are informational (shown, and the test ERRORs "nothing was judged" rather than pass).
A GPU other processes used while a phase measured it is recorded busy (``judge.busy``).
"""

from __future__ import annotations

from typing import Literal

from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.contracts.neighbours import FIGURES, NeighbourGpu, NeighboursRecord

__all__ = ["NEIGHBOUR_METRICS", "judge_neighbours", "metric_of", "neighbours_absent"]

NEIGHBOUR_METRICS = tuple(f"neighbour_{figure}_ratio_pct" for figure in FIGURES)


def metric_of(figure: str) -> str:
    """The catalogue's name of a figure's ratio."""
    return f"neighbour_{figure}_ratio_pct"


def neighbours_absent(declared_gpus: int, node: str) -> str | None:
    """Why the test does not apply: the node declares fewer than two GPUs, so it has no two halves to hand to
    two tenants."""
    if declared_gpus < 2:
        return f"{node} declares {declared_gpus} GPU: two tenants side by side need at least 2 GPUs (two halves)"
    return None


def _gpus(indices: list[int]) -> str:
    return ("GPU " if len(indices) == 1 else "GPUs ") + ", ".join(map(str, indices))


def _subject(gpu: NeighbourGpu, record: NeighboursRecord) -> str:
    """``0 (0000:..) of half A (GPU 0) beside half B (GPUs 1, 2)`` (shown as ``GPU 0 (..) of half A ...``): the
    GPU, its set and the other set."""
    other: Literal["A", "B"] = "B" if gpu.half == "A" else "A"
    label = gpu_label({"index": gpu.index, "pci_bus_id": gpu.pci_bus_id})
    mine, theirs = record.halves.get(gpu.half, []), record.halves.get(other, [])
    return f"{label} of half {gpu.half} ({_gpus(mine)}) beside half {other} ({_gpus(theirs)})"


def judge_neighbours(record: NeighboursRecord, judge: JudgeLike, node: str) -> None:
    """Every GPU's ratio for every figure, with its figures alone and together; busy GPUs named; a figure not
    taken is unreadable (an ERROR), never a pass."""
    if record.why is not None:
        judge.unreadable(NEIGHBOUR_METRICS[0], record.why, node=node)
        return
    labels = {g.index: gpu_label({"index": g.index, "pci_bus_id": g.pci_bus_id}) for g in record.gpus}
    for busy in record.busy:
        procs = ", ".join(f"pid {p.pid} {p.name} ({p.used_mib} MiB)" for p in busy.processes)
        judge.busy(f"{procs} while measured {busy.phase}", node=node, gpu=labels.get(busy.gpu) or busy.gpu)
    for gpu in record.gpus:
        subject = _subject(gpu, record)
        for figure in FIGURES:
            solo, together, ratio = gpu.solo.get(figure), gpu.together.get(figure), gpu.ratio_pct.get(figure)
            unit = record.units.get(figure, "")
            if ratio is None:
                why = f"{figure}: alone {solo}, beside the other half {together} {unit}: no ratio"
                judge.unreadable(metric_of(figure), why, node=node, pair=subject)
                continue
            judge.check(
                metric_of(figure),
                ratio,
                node=node,
                scale=len(record.gpus),  # the host's share of each GPU depends on how many pull from it at once
                pair=subject,
                solo=solo,
                together=together,
                unit_of_figures=unit,
                seconds=record.seconds,
            )
