"""Real fine-tune result lines of one H100 80GB HBM3 (2026-11-25), and a judge that takes every node for an H100 SKU.

Shared by the selftests that judge the 7B-class runs from those lines (``test_training_scale.py``, one GPU;
``test_training_scale_node.py``, an 8-GPU node built from them).
"""

from __future__ import annotations

import json
from dataclasses import replace

from gpuaccept.dispatch.result import RankRecord, parse_records
from gpuaccept.judging.judge import Judge
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.training.config import FIXTURES

__all__ = ["h100_judge", "h100_run", "h100_serving", "with_serving"]


def h100_run(fixture: str) -> list[RankRecord]:
    """A fine-tune's result line as the probe printed it on one H100 80GB HBM3 (2026-11-25; docs/measurements.md
    '1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'): ``finetune-scale-h100.out``
    (``benchmarks/train_scale_device.sh det``, run a), ``finetune-pretrained-6.5b-h100.out`` (the 6.53 B
    checkpoint's ``--model-path`` probe by hand), with the serving figures the probe has added since
    (``with_serving``)."""
    return with_serving(parse_records("finetune", (FIXTURES / fixture).read_text(), 1, ()))


def h100_judge() -> Judge:
    """A judge with the packaged thresholds that takes every node for an H100 SXM."""
    return Judge(load_thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")


def h100_serving() -> dict:
    """``benchmarks/infer_bench.py``'s measurement of the built-in 7B on one H100 80GB HBM3, 2026-11-26 (base, merged,
    the unmerged and dynamic-cache speeds): what ``gpuaccept.inference.bench.measure`` returns on a GPU."""
    return json.loads((FIXTURES / "serving-7b-h100.json").read_text())


def with_serving(records: list[RankRecord]) -> list[RankRecord]:
    """The recorded lines (taken before the fine-tune served its models) with the serving figures the probe
    now adds: each GPU serving its own merged adapter, and rank 0's lifecycle of base against merged."""
    serving = h100_serving()
    base, merged = serving["base"], serving["merged"]
    lifecycle = {
        "serving_base": base,
        "serving_merged": merged,
        "unmerged_tokens_per_s": serving["unmerged_eager"]["tokens_per_s"],
        "merged_speed_ratio": round(merged["decode_1"]["tokens_per_s"] / base["decode_1"]["tokens_per_s"], 4),
        "f1_gain_pts": 62.98,  # the suite's own 7B lifecycle on the H100 (the benchmark's adapter is random)
    }
    out = []
    for k, record in enumerate(records):
        data = {**record.data, "serving": merged}
        if k == 0:
            data |= lifecycle
        out.append(replace(record, data=data))
    return out
