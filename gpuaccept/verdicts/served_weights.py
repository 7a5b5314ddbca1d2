"""The fine-tuned model's merged weights, its one home: saved to the site's models filesystem, loaded back cold to the
first token, from node-local scratch too where one is declared.

The fine-tune (``gpuaccept.training.served_weights``) merges the launch's first adapter into its base once training
is over, saves the weights as safetensors shards, drops them from the page cache and loads them into a model built
on the GPU up to one prefill's first token. Judged per node (rank 0's node of each node's launch):
* every file read back identical to what was written (``model_weights_bytes``), naming the files that differ;
* the cold model's first token the one the merged model gave before the save (``model_cold_start_token``);
* the save's GB/s against the filesystem's contract's per-node write figure (``model_weights_save_gbps``) and the
  cold start's, the weights' bytes over the time to the first token, against its per-node read figure
  (``model_cold_start_gbps``): the first token no later than the contracted read of the weights.
Only where the site declares a filesystem of role ``models`` (else ``checkpoints``): the launch saves no merged
weights without one (``--models-dir``).
"""

from __future__ import annotations

from gpuaccept.contracts.finetune_storage import ColdStart, ServedWeightsOutcome
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.thresholds.storage_site import Filesystem, StorageSection
from gpuaccept.training.plan import Store
from gpuaccept.verdicts.resume import checkpoint_filesystem
from gpuaccept.verdicts.storage import described, judge_speed, per_node_figure

__all__ = [
    "SERVED_METRICS",
    "judge_served_weights",
    "models_filesystem",
    "scratch_filesystem",
    "stores",
]

#: what the served weights judge against a limit (the byte and token checks are expectations)
SERVED_METRICS = ("model_weights_save_gbps", "model_cold_start_gbps")

Declared = tuple[str, Filesystem] | None


def models_filesystem(storage: StorageSection) -> Declared:
    """Where the merged weights go: the first declared filesystem of role ``models`` (a shared one first), else the
    checkpoint filesystem; None when neither is declared."""
    ranked = sorted(
        (fs.scope != "shared", index, name)
        for index, (name, fs) in enumerate(storage.filesystems.items())
        if fs.role == "models"
    )
    return (ranked[0][2], storage.filesystems[ranked[0][2]]) if ranked else checkpoint_filesystem(storage)


def scratch_filesystem(storage: StorageSection) -> Declared:
    """The first node-local filesystem of role ``scratch`` (BOOT04's NVMe), None when none is declared."""
    for name, fs in storage.filesystems.items():
        if fs.role == "scratch" and fs.scope == "local":
            return name, fs
    return None


def stores(storage: StorageSection) -> tuple[Store | None, Store | None]:
    """The models and scratch filesystems at their contracts' per-node rates, as the launch's plan moves the merged
    weights over them (``training.plan.FinetunePlan.of``); None where one is not declared."""

    def store(declared: Declared) -> Store | None:
        return Store(declared[0], *(per_node_figure(declared[1], rw) for rw in ("write", "read"))) if declared else None

    return store(models_filesystem(storage)), store(scratch_filesystem(storage))


def _cold(judge: JudgeLike, cold: ColdStart, declared: Declared, node: str) -> None:
    """One cold start: its bytes, its first token, its GB/s to that token."""
    where = {"fspath": cold["path"], "loaded_from": cold["loaded_from"]}
    judge.expect(
        "model_weights_bytes", described(cold["mismatched"]), "identical", node=node, files=cold["files"], **where
    )
    if cold["error"] is not None or cold["first_token"] == "not reached":
        judge.unreadable("model_cold_start_gbps", cold["error"] or "no first token", node=node, **where)
        return
    judge.expect(
        "model_cold_start_token",
        cold["first_token"],
        "same",
        node=node,
        tokens=cold["tokens"],
        logits_equal=cold["logits_equal"],
        max_abs_logit_delta=cold["max_abs_logit_delta"],
        **where,
    )
    figures = {k: cold[k] for k in ("ttft_s", "read_s", "placed_s", "cache", "device")}
    judge_speed(judge, "model_cold_start_gbps", cold, declared, "read", node=node, **figures, **where)


def judge_served_weights(
    served: ServedWeightsOutcome | None, models: Declared, scratch: Declared, judge: JudgeLike, node: str
) -> None:
    """Judge the merged weights rank 0's node saved and cold-started (its ``served_weights`` payload). Where the site
    declares no models or checkpoint filesystem nothing was asked of the launch, and nothing is judged: the weights'
    15 GB say nothing about a site's storage when they go to the node's run folder."""
    if served is None and models is None:
        return
    if served is None:
        judge.unreadable("model_cold_start_gbps", "the launch saved no merged weights (rank 0's node)", node=node)
        return
    if served["outcome"] == "error" or served["saved"] is None:
        judge.unreadable("model_cold_start_gbps", served["error"] or "the merged weights were not saved", node=node)
        return
    saved = served["saved"]
    if saved["outcome"] == "error":  # the filesystem refused the save (full, read-only, gone): nothing to start from
        judge.expect(
            "model_weights_bytes", f"not saved: {saved['error']}", "identical", node=node, fspath=saved["path"]
        )
        return
    figures = {"seconds": saved["seconds"], "files": saved["files"], "fspath": saved["path"]}
    judge_speed(judge, "model_weights_save_gbps", saved, models, "write", node=node, **figures)
    cold = served["cold"]
    if cold is None:
        judge.unreadable("model_cold_start_gbps", served["error"] or "no cold start", node=node)
        return
    _cold(judge, cold, models, node)
    if scratch is None:
        return
    copy, scratch_cold = served["scratch_copy"], served["scratch_cold"]
    if copy is None or scratch_cold is None:
        why = served["error"] or "not copied to scratch: the weights read from the models filesystem differed"
        judge.unreadable("model_cold_start_gbps", why, node=node, loaded_from="scratch")
        return
    judge.info(
        "model_scratch_copy_gbps",
        copy["gbps"],
        node=node,
        bytes=copy["bytes"],
        seconds=copy["seconds"],
        fspath=copy["path"],
        filesystem=scratch[0],
    )
    _cold(judge, scratch_cold, scratch, node)
