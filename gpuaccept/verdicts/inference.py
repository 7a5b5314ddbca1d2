"""The inference area's judging: a model served at serving speed, held to the GPU's own roofline.

Decoding reads every weight once a step, so its speed is bound by HBM: a step's bytes (``inference.roofline``)
over its time, divided by the SKU's datasheet HBM bandwidth (``skus.<SKU>.datasheet.hbm_tbps``), is its MBU,
judged at batch 1 and batched. The prefill is bound by compute: its executed FLOPs over its time, divided by
the dense BF16 peak, is its MFU. Both are fractions of the SKU's own peak, so one measured floor serves every
SKU whose kernels reach the same share (``thresholds.yaml`` cites the runs).

Judged on GPUs for the 7B-class runs (the built-in 7B and ``--model-path`` checkpoints):

- every GPU, at the same time, serving the adapter it trained alone (``judge_serving``): MBU batch 1 and
  batched (the dynamic-cache fallback by its own floor, named), prefill MFU;
- every GPU of one SKU and software stack gives the same greedy tokens and logits checksum
  (``judge_agreement``): the weights are bit-identical (the solo fine-tune is), so a GPU that differs
  computes wrong; it is named with the prompt and the first differing position;
- the lifecycle (``judge_lifecycle_serving``): the merged model decodes as fast as the base (a band from the
  repeats' spread), the graph's tokens equal the eager step's, and the tuned model answers the test split
  better than the base (token F1).

CPU ranks and the small model on GPUs (whose decode times kernel launches, not HBM) are reported; the answer
quality is judged on every run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaccept.contracts.finetune import LifecycleCompared, RankRun
from gpuaccept.contracts.judge import JudgeLike
from gpuaccept.contracts.serving import DecodeFigures, ServedOwn
from gpuaccept.judging.trajectory import key_text, stack_key

__all__ = ["AGREEMENT", "LIFECYCLE", "SERVING", "Served", "judge_agreement", "judge_lifecycle_serving", "judge_serving"]

SERVING = (
    "infer_decode_mbu_pct",
    "infer_decode_mbu_pct_batch",
    "infer_decode_mbu_pct_dynamic",
    "infer_prefill_mfu_pct",
)
LIFECYCLE = ("infer_merged_speed_ratio", "infer_graph_eager_mismatch", "infer_f1_gain_pts")
AGREEMENT = ("infer_agreement_mismatch",)


def _peak(judge: JudgeLike, node: str, name: str, metric: str) -> float | None:
    """The SKU's datasheet figure ``name`` that ``metric`` divides by; None, with ``metric`` recorded
    unreadable, where the catalogue has none."""
    sku = judge.sku(node)
    peak = judge.datasheet(sku, name)
    if peak is None:
        why = f"cannot judge inference on SKU {sku}: no datasheet {name} (add skus.{sku}.datasheet in a site file)"
        judge.unreadable(metric, why, node=node)
    return peak


def _mbu(judge: JudgeLike, node: str, figures: DecodeFigures, metric: str) -> float | None:
    peak = _peak(judge, node, "hbm_tbps", metric)
    return None if peak is None else round(100 * float(figures["read_tb_per_s"]) / peak, 2)


def _decode_extra(figures: DecodeFigures) -> dict[str, Any]:
    return {
        "streams": figures["streams"],
        "tokens_per_s": figures["tokens_per_s"],
        "step_ms": figures["step_ms"],
        "step_ms_spread": figures["step_ms_spread"],
        "bytes_per_step": figures["bytes_per_step"],
        "read_tb_per_s": figures["read_tb_per_s"],
        "repeats": figures["repeats"],
    }


def judge_serving(judge: JudgeLike, run: RankRun, gpu: str | None) -> None:
    """One GPU serving its own merged adapter: decode MBU at batch 1 and batched, prefill MFU."""
    node, data = run.node, run.trained["serving"]
    where: dict[str, Any] = {"node": node, "gpu": gpu}
    if data is None or data["outcome"] == "error":
        why = f"serving failed: {data['error']}" if data else "the fine-tune's result holds no serving figures"
        judge.unreadable("infer_decode_mbu_pct", why, **where)
        return
    dynamic = data["mode"] == "dynamic"
    single = "infer_decode_mbu_pct_dynamic" if dynamic else "infer_decode_mbu_pct"
    mbu = _mbu(judge, node, data["decode_1"], single)
    if mbu is None:
        return
    judge.check(
        single,
        mbu,
        **where,
        **_decode_extra(data["decode_1"]),
        mode=data["mode"],
        fallback=data["fallback"],
    )
    if not dynamic:
        mbu = _mbu(judge, node, data["decode_batched"], "infer_decode_mbu_pct_batch")
        if mbu is None:
            return
        judge.check(
            "infer_decode_mbu_pct_batch",
            mbu,
            **where,
            **_decode_extra(data["decode_batched"]),
            batch_halved_from=data["batch_halved_from"],
        )
    prefill = data["prefill"]
    peak = _peak(judge, node, "bf16_dense_tflops", "infer_prefill_mfu_pct")
    if peak is None:
        return
    mfu = round(100 * float(prefill["tflops_per_s"]) / peak, 2)
    judge.check("infer_prefill_mfu_pct", mfu, **where, ttft_ms=prefill["ttft_ms"], tokens=prefill["tokens"])


@dataclass(frozen=True)
class Served:
    """What one GPU's greedy decoding gave: the single stream's tokens and the logits' checksums."""

    node: str
    gpu: str
    tokens: tuple[int, ...]
    checksums: tuple[str, ...]

    @classmethod
    def of(cls, serving: ServedOwn, node: str, gpu: str) -> Served:
        sums = (serving["decode_1"]["checksum"], serving["decode_batched"]["checksum"])
        return cls(node, gpu, tuple(serving["decode_1"]["tokens"]), sums)

    @property
    def outcome(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        return self.tokens, self.checksums


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def judge_agreement(judge: JudgeLike, served: Sequence[Served], prints: Mapping[str, Mapping[str, Any]]) -> int:
    """Every GPU of one SKU and stack against its group's majority (tokens and checksums both); with no
    majority every member fails: nothing says which is right. Returns how many GPUs were judged."""
    groups: dict[str, list[Served]] = {}
    for one in served:
        key = key_text(stack_key(judge.sku(one.node), prints.get(one.node) or {}))
        groups.setdefault(key, []).append(one)
    judged = 0
    for key, members in groups.items():
        if len(members) < 2:
            continue
        counts = Counter(m.outcome for m in members)
        top, count = counts.most_common(1)[0]
        reference = top if count * 2 > len(members) else None
        for member in members:
            judged += 1
            same = reference is not None and member.outcome == reference
            extra: dict[str, Any] = {"group": key, "members": len(members), "agreeing": count}
            if not same:
                ref_tokens = reference[0] if reference is not None else ()
                extra |= {
                    "prompt": "the first test prompt (batch 1) and the first batch of the test split",
                    "first_differing_token": _first_difference(member.tokens, ref_tokens),
                    "checksums": list(member.checksums),
                    "majority": "none: no outcome shared by more than half"
                    if reference is None
                    else list(reference[1]),
                }
            judge.check("infer_agreement_mismatch", 0 if same else 1, node=member.node, gpu=member.gpu, **extra)
    return judged


def judge_lifecycle_serving(judge: JudgeLike, gpu_run: bool, data0: LifecycleCompared, node0: str) -> None:
    """Base against tuned on the lifecycle's rank, at serving speed."""
    base, merged = data0["serving_base"], data0["serving_merged"]
    judge.check(
        "infer_f1_gain_pts",
        data0["f1_gain_pts"],
        node=node0,
        base=base["answers"],
        finetuned=merged["answers"],
    )
    speeds = {
        "base_tokens_per_s": base["decode_1"]["tokens_per_s"],
        "merged_tokens_per_s": merged["decode_1"]["tokens_per_s"],
        "unmerged_tokens_per_s": data0["unmerged_tokens_per_s"],
        "mode": merged["mode"],
    }
    if not gpu_run:
        ratio = data0["merged_speed_ratio"]
        judge.info("infer_tokens_per_s", speeds.pop("base_tokens_per_s"), node=node0, merged_ratio=ratio, **speeds)
        return
    judge.check(
        "infer_merged_speed_ratio",
        data0["merged_speed_ratio"],
        node=node0,
        **speeds,
        base_spread_ms=base["decode_1"]["step_ms_spread"],
        merged_spread_ms=merged["decode_1"]["step_ms_spread"],
    )
    eager = merged["eager_1"]
    if eager is None:
        judge.unreadable("infer_graph_eager_mismatch", f"no eager run beside the {merged['mode']} decode", node=node0)
        return
    judge.check(
        "infer_graph_eager_mismatch",
        0 if eager["tokens_equal"] else 1,
        node=node0,
        checksum_equal=eager["checksum_equal"],
        eager_tokens_per_s=eager["tokens_per_s"],
    )
