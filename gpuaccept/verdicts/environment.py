"""Environment: judge a node's fingerprint (complete, the CPUs Slurm granted usable) and whether the
nodes' fingerprints agree (``judging.fields.drift`` finds the odd node); the node check holds a node's
driver, CUDA and NCCL to those of the run that accepted it (``judge_expected_versions``). Every declared
GPU present is no check of this module: ``test_gpu_health`` judges it once per node, from NVML
(``verdicts.gpu_health.judge_gpu_count``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.judging.fields import drift
from gpuaccept.verdicts.slurm import judge_cpus_granted

__all__ = ["judge_expected_versions", "judge_fingerprint", "judge_versions"]


def judge_fingerprint(fp: dict[str, Any], judge: JudgeLike, node: str) -> None:
    """The step answered from ``node`` and read every field the suite needs. Whether it shows every GPU it
    declares is judged once per node, from NVML, by ``test_gpu_health`` (``gpu_health.judge_gpu_count``),
    never a second time here."""
    judge.expect("slurm_step_node", fp["node"], node, node=node, probe="fingerprint")
    shown = fp["gpus"]["count"]
    missing = [name for name, ok in (("kernel", fp["kernel"]), ("OS", fp["os"] != "unknown")) if not ok]
    if shown:
        gpu_fields = (("GPU driver", fp["gpus"]["driver"]), ("torch", fp["stack"]["torch"]))
        missing += [name for name, ok in gpu_fields if not ok]
    observed = "complete" if not missing else "missing: " + ", ".join(missing)
    judge.expect("fingerprint_complete", observed, "complete", node=node, torch_error=fp["stack"].get("torch_error"))
    judge.info("memory_gib", fp["memory_gib"], node=node)
    judge.info("cpu_cores", fp["cpu"]["cores"], node=node)
    usable, granted, host = fp["cpu"]["usable_cpus"], fp["cpu"].get("granted_cpus"), fp["cpu"]["threads"]
    judge_cpus_granted(judge, node, usable, granted, host)


def judge_versions(fingerprints: dict[str, Any], judge: JudgeLike) -> None:
    """Every fingerprint field on every node against the value most nodes have."""
    values, odd = drift(fingerprints)
    majority = {d.field: d.majority for d in odd}
    for field, per_node in values.items():
        reference = majority.get(field, next(iter(per_node.values())))
        for node, value in per_node.items():
            judge.expect(
                "versions_consistent",
                "absent" if value is None else value,
                "absent" if reference is None else reference,
                node=node,
                field=field,
            )


def judge_expected_versions(
    observed: Mapping[str, Any], expected: Mapping[str, Any], fields: Iterable[str], judge: JudgeLike, node: str
) -> None:
    """The node check's rule: each of ``fields`` (driver, CUDA, NCCL) as the node has it now against the run
    that accepted it; a field that run had none of (a CPU node has no driver) holds the node to nothing, one
    unreadable here is named."""
    for label in fields:
        if expected.get(label) is None:
            continue
        if observed.get(label) is None:
            why = f"{label} unreadable here (expected {expected[label]})"
            judge.unreadable("versions_consistent", why, node=node, field=label)
            continue
        judge.expect("versions_consistent", observed[label], expected[label], node=node, field=label)
