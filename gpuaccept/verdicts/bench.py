"""What the compute, memory and NVLink judges share about a node's ``gpubench`` result (or a per-GPU probe's
ranks): which GPUs were measured, which were busy, and whether their checksums agree.

matmul, HBM, host and GPU-pair figures come from one ``gpubench`` step per node (one process drives
every GPU, so torch's start-up is paid once; the tests run it once per session through
``cluster.run_shared``). A GPU that had someone else's processes on it before the benchmark is not
measured and is recorded busy (``judge.busy``: the test is an error naming it), while the node's other
GPUs are still judged. A fixed-seed product must give the same checksum on every GPU of a node:
identical GPUs running identical inputs through the same cuBLAS agree bit for bit, so the odd one out
computes wrong results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Literal, TypeVar

from gpuaccept.contracts.bench import (
    BenchPerGpu,
    BusyGpu,
    GpuBenchError,
    GpuBenchRan,
    MatmulBurnIn,
    MatmulBusy,
    MatmulSizes,
    P2pMeasured,
)
from gpuaccept.contracts.judge import JudgeLike, gpu_label

__all__ = [
    "BenchPart",
    "Part",
    "agreement",
    "bench_parts",
    "judge_checksums",
    "p2p_result",
    "rank_parts",
    "record_busy",
    "record_step",
]

T = TypeVar("T")

#: One GPU's figures: its label (``3 (0000:9A:00.0)``) and what the probe measured on it.
Part = tuple[str | None, T]

#: a part of the gpubench result that is per GPU
BenchPart = Literal["matmul", "membw", "hostbw"]

#: the check a part's figures go to first: a result that holds none of them is that check unreadable
PART_METRIC: dict[BenchPart, str] = {
    "matmul": "matmul_bf16_tflops",
    "membw": "membw_tbps",
    "hostbw": "hostbw_h2d_gbps",
}


def record_busy(
    judge: JudgeLike,
    node: str,
    busy: Iterable[BusyGpu],
    labels: Mapping[int, str | None] | None = None,
    label: str | None = None,
) -> set[int]:
    """Record every GPU the probe found others' processes on (``judge.busy``), and return their indices:
    the one place the busy-GPU preamble is written. A GPU is named by ``label`` (a per-GPU rank's own
    GPU), else by its index in ``labels`` (a node-wide probe's GPUs), else by its index."""
    found = set()
    for entry in busy:
        procs = ", ".join(f"pid {p['pid']} {p['name']} ({p['used_mib']} MiB)" for p in entry["processes"])
        named = labels[entry["gpu"]] if labels is not None and entry["gpu"] in labels else None
        judge.busy(procs, node=node, gpu=label or named or entry["gpu"])
        found.add(entry["gpu"])
    return found


def record_step(bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str) -> None:
    """The node's gpubench step: its wall time as the process saw it and where it went (``phases``), recorded once
    (by ``test_matmul``; the memory tests read the same step). The step's own wall is on the step's record."""
    if bench["outcome"] == "measured":
        phases = bench["phases"]
        judge.info("gpubench_wall_s", phases["process_wall_s"], node=node, phases=phases)


def _labels(bench: GpuBenchRan) -> dict[int, str | None]:
    return {g["index"]: gpu_label(g) for g in bench["gpus"]}


def bench_parts(
    bench: GpuBenchRan | GpuBenchError,
    part: BenchPart,
    figures: Callable[[BenchPerGpu], T | None],
    judge: JudgeLike,
    node: str,
) -> list[Part[T]]:
    """Each measured GPU's ``part`` (its ``figures``) of a node's gpubench result; a busy GPU is recorded busy
    and left out. A result that could not measure (``error``), or lacks the part, or measured no GPU, is the
    part's check unreadable (``judge.unreadable``: ERROR, never FAILED) and gives no GPU to judge."""
    if bench["outcome"] == "error":
        judge.unreadable(PART_METRIC[part], f"gpubench measured no GPU ({bench['error']})", node=node)
        return []
    labels = _labels(bench)
    busy = record_busy(judge, node, bench["busy"], labels)
    parts: list[Part[T]] = []
    for entry in bench["per_gpu"]:
        label = labels[entry["index"]]
        found = figures(entry)
        if found is None:
            why = f"the gpubench result holds no {part} figures (parts run: {', '.join(bench['parts'])})"
            judge.unreadable(PART_METRIC[part], why, node=node, gpu=label)
            return []
        parts.append((label, found))
    if not parts and not busy:
        judge.unreadable(PART_METRIC[part], "gpubench measured no GPU (none in its result)", node=node)
    return parts


def rank_parts(
    ranks: Iterable[tuple[str | None, MatmulBusy | MatmulSizes | MatmulBurnIn]],
    judge: JudgeLike,
    node: str,
    metric: str,
) -> list[Part[MatmulBurnIn]]:
    """Each burn-in rank (one per GPU, ``(its GPU's label, its payload)``); a busy GPU is recorded busy and left
    out, and a rank that ran no burn-in is ``metric`` unreadable."""
    parts: list[Part[MatmulBurnIn]] = []
    for label, payload in ranks:
        record_busy(judge, node, payload["busy"], label=label)
        if payload["outcome"] == "burn_in":
            parts.append((label, payload))
        elif payload["outcome"] == "sizes":
            judge.unreadable(metric, "the matmul rank measured sizes, not a burn-in", node=node, gpu=label)
    return parts


def agreement(values: Mapping[str, int]) -> dict[str, str]:
    """Per GPU: ``match`` if its checksum equals the majority's, else why not (2 GPUs: both named)."""
    if len(values) < 2:
        return dict.fromkeys(values, "match")
    counts = Counter(values.values())
    top, top_count = counts.most_common(1)[0]
    if top_count * 2 > len(values):
        return {
            label: "match" if value == top else f"differs from the other {top_count} GPUs"
            for label, value in values.items()
        }
    return {label: "no majority: " + ", ".join(f"{k}={v}" for k, v in values.items()) for label in values}


def judge_checksums(checksums: Iterable[Part[int]], judge: JudgeLike, node: str, metric: str) -> None:
    """A check per GPU that its checksum agrees with the node's majority (nothing to compare on one GPU)."""
    values = {str(label): value for label, value in checksums}
    if len(values) < 2:
        return  # one GPU: nothing to compare it with (its checksum rides on its throughput check)
    for label, verdict in agreement(values).items():
        judge.check(metric, verdict, node=node, gpu=label, checksum=values[label])


def p2p_result(
    bench: GpuBenchRan | GpuBenchError, judge: JudgeLike, node: str, metric: str
) -> tuple[P2pMeasured, dict[int, str | None]] | None:
    """The GPU-pair copies of the node's gpubench result and its GPUs' labels: judged by the bandwidth and the
    NVLink-error tests, one measurement, so the two verdicts speak of the same load. None where there is nothing
    to judge: the busy GPUs recorded busy (the pairs were not copied), or ``metric`` recorded unreadable (the
    result could not measure, or holds no pairs)."""
    if bench["outcome"] == "error":
        judge.unreadable(metric, f"gpubench measured no GPU ({bench['error']})", node=node)
        return None
    labels = _labels(bench)
    busy = record_busy(judge, node, bench["busy"], labels)
    p2p = bench["p2p"]
    if p2p is None:
        judge.unreadable(metric, "the gpubench result holds no GPU-pair figures (p2p not run)", node=node)
        return None
    if p2p["outcome"] == "busy":
        if not busy:  # the probe skips the pairs only for a busy GPU: one it did not name is still no pass
            judge.unreadable(metric, p2p["skipped"], node=node)
        return None
    return p2p, labels
