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
from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.contracts.judge import JudgeLike, gpu_label

__all__ = [
    "Part",
    "agreement",
    "bench_parts",
    "judge_checksums",
    "p2p_result",
    "rank_parts",
    "record_busy",
    "record_step",
]


#: One GPU's figures: its label (``3 (0000:9A:00.0)``) and what the probe measured on it.
Part = tuple[str | None, dict[str, Any]]

#: the check a part's figures go to first: a result that holds none of them is that check unreadable
PART_METRIC = {"matmul": "matmul_bf16_tflops", "membw": "membw_tbps", "hostbw": "hostbw_h2d_gbps"}


def record_busy(
    judge: JudgeLike,
    node: str,
    busy: Iterable[dict[str, Any]],
    labels: Mapping[Any, str | None] | None = None,
    label: str | None = None,
) -> set[Any]:
    """Record every GPU the probe found others' processes on (``judge.busy``), and return their indices:
    the one place the busy-GPU preamble is written. A GPU is named by ``label`` (a per-GPU rank's own
    GPU), else by its index in ``labels`` (a node-wide probe's GPUs), else by its index."""
    found = set()
    for entry in busy:
        procs = ", ".join(f"pid {p['pid']} {p.get('name')} ({p.get('used_mib')} MiB)" for p in entry["processes"])
        judge.busy(procs, node=node, gpu=label or (labels or {}).get(entry.get("gpu")) or entry.get("gpu"))
        found.add(entry.get("gpu"))
    return found


def record_step(bench: Mapping[str, Any], judge: JudgeLike, node: str) -> None:
    """The node's gpubench step: its wall time as the process saw it and where it went (``phases``), beside
    the step's own (``step_s``), recorded once (by ``test_matmul``; the memory tests read the same step)."""
    phases = bench.get("phases") or {}
    judge.info("gpubench_wall_s", phases.get("process_wall_s"), node=node, phases=phases, step_s=bench.get("step_s"))


def bench_parts(data: dict[str, Any], part: str, judge: JudgeLike, node: str) -> list[Part]:
    """Each measured GPU's ``part`` (matmul, membw, hostbw) of a node's gpubench result; a busy GPU is
    recorded busy and left out. A result that lacks the part, or measured no GPU, is the part's check
    unreadable (``judge.unreadable``) and gives no GPU to judge."""
    labels = {g["index"]: gpu_label(g) for g in data.get("gpus") or []}
    busy = record_busy(judge, node, data.get("busy") or [], labels)
    parts: list[Part] = []
    for gpu, entry in zip(data.get("gpus") or [], data.get("per_gpu") or [], strict=False):
        if gpu["index"] in busy:
            continue
        if part not in entry:
            judge.unreadable(
                PART_METRIC[part], f"the gpubench result holds no {part} figures", node=node, gpu=gpu_label(gpu)
            )
            return []
        parts.append((gpu_label(gpu), entry[part]))
    if not parts and not busy:
        why = f"gpubench measured no GPU ({data.get('error') or 'no GPU in its result'})"
        judge.unreadable(PART_METRIC[part], why, node=node)
    return parts


def rank_parts(records: Iterable[Any], judge: JudgeLike, node: str) -> list[Part]:
    """Each measured GPU of a per-GPU probe (one rank per GPU); a busy GPU is recorded busy and left out."""
    parts: list[Part] = []
    for record in records:
        record_busy(judge, node, record.data.get("busy") or [], label=record.gpu_label)
        if "skipped" not in record.data:
            parts.append((record.gpu_label, record.data))
    return parts


def agreement(values: dict[str, Any]) -> dict[str, str]:
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


def judge_checksums(parts: list[Part], judge: JudgeLike, node: str, metric: str, key: str) -> None:
    """A check per GPU that its checksum agrees with the node's majority (nothing to compare on one GPU)."""
    values = {str(label): data.get(key) for label, data in parts}
    if len(values) < 2:
        return  # one GPU: nothing to compare it with (its checksum rides on its throughput check)
    for label, verdict in agreement(values).items():
        judge.check(metric, verdict, node=node, gpu=label, checksum=values[label])


def p2p_result(bench: dict[str, Any], judge: JudgeLike, node: str, metric: str) -> dict[str, Any] | None:
    """The GPU-pair copies of the node's gpubench result: judged by the bandwidth and the NVLink-error
    tests, one measurement, so the two verdicts speak of the same load. None, with ``metric`` recorded
    unreadable, where the result holds none."""
    if "p2p" not in bench:
        judge.unreadable(metric, "the gpubench result holds no GPU-pair figures", node=node)
        return None
    data: dict[str, Any] = bench["p2p"]
    return data
