"""Environment: judge a node's fingerprint (complete, the CPUs Slurm granted usable) and whether the
nodes' fingerprints agree (``judging.fields.drift`` finds the odd node); the node check holds a node's
driver, CUDA and NCCL to those of the run that accepted it (``judge_expected_versions``). Every declared
GPU present is no check of this module: ``test_gpu_health`` judges it once per node, from NVML
(``verdicts.gpu_health.judge_gpu_count``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.node import FingerprintPayload
from gpuaccept.judging.fields import drift
from gpuaccept.verdicts.slurm import judge_cpus_granted

__all__ = ["judge_expected_versions", "judge_fingerprint", "judge_versions"]


def judge_fingerprint(fp: FingerprintPayload, judge: JudgeLike, node: str) -> None:
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
    torch_error = fp["stack"]["torch_error"] if "torch_error" in fp["stack"] else None
    judge.expect("fingerprint_complete", observed, "complete", node=node, torch_error=torch_error)
    judge.info("memory_gib", fp["memory_gib"], node=node)
    judge.info("cpu_cores", fp["cpu"]["cores"], node=node)
    usable, granted, host = fp["cpu"]["usable_cpus"], fp["cpu"]["granted_cpus"], fp["cpu"]["threads"]
    judge_cpus_granted(judge, node, usable, granted, host)


def judge_versions(fingerprints: Mapping[str, FingerprintPayload], judge: JudgeLike) -> None:
    """Every fingerprint field on every node against the value most nodes have."""
    values, odd = drift(fingerprints)
    majority = {d.field: d.majority for d in odd}
    for field, per_node in values.items():
        reference = majority[field] if field in majority else next(iter(per_node.values()))
        for node, value in per_node.items():
            judge.expect(
                "versions_consistent",
                "absent" if value is None else value,
                "absent" if reference is None else reference,
                node=node,
                field=field,
            )


def judge_expected_versions(
    observed: Mapping[str, str | None],
    expected: Mapping[str, str | None],
    fields: Iterable[str],
    judge: JudgeLike,
    node: str,
) -> None:
    """The node check's rule: each of ``fields`` (driver, CUDA, NCCL) as the node has it now against the run
    that accepted it; a field that run had none of (a CPU node has no driver) holds the node to nothing, one
    unreadable here is named."""
    for label in fields:
        want = expected[label] if label in expected else None
        have = observed[label] if label in observed else None
        if want is None:
            continue
        if have is None:
            judge.unreadable(
                "versions_consistent", f"{label} unreadable here (expected {want})", node=node, field=label
            )
            continue
        judge.expect("versions_consistent", have, want, node=node, field=label)
