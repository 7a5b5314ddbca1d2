"""Real fine-tune result lines of one H100 80GB HBM3 (2026-11-25), and a judge that takes every node for an H100 SKU.

Shared by the selftests that judge the 7B-class runs from those lines (``test_training_scale.py``, one GPU;
``test_training_scale_node.py``, an 8-GPU node built from them).
"""

from __future__ import annotations

import json
from dataclasses import replace

from gpuaccept.contracts.finetune import LifecycleCompared, RankRun
from gpuaccept.dispatch.result import RankRecord, parse_records
from gpuaccept.inference.kernels import SERVING_KERNELS
from gpuaccept.judging.judge import Judge
from gpuaccept.probes.specs import FINETUNE
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.training.config import FIXTURES
from gpuaccept.training.finetune_launch import strategy_records

__all__ = ["h100_judge", "h100_run", "h100_serving", "with_serving"]


def h100_run(fixture: str) -> list[RankRun]:
    """A fine-tune's result line as the probe printed it on one H100 80GB HBM3 (2026-11-25; docs/measurements.md
    '1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'): ``finetune-scale-h100-precontract.out``
    (``benchmarks/train_scale_device.sh det``, run a), ``finetune-pretrained-6.5b-h100-precontract.out`` (the 6.53 B
    checkpoint's ``--model-path`` probe by hand), with the serving figures the probe has added since
    (``with_serving``), moved into the contract's places (``to_contract``) and validated as it."""
    records = parse_records("finetune", (FIXTURES / fixture.replace(".out", "-precontract.out")).read_text(), 1, ())
    return strategy_records([FINETUNE.validate(record) for record in with_serving(records)], "solo")


#: what the pre-contract lines wrote that the contract no longer holds (figures since measured by ``serving``)
_DROPPED = (
    "base_gen_tokens_per_s",
    "base_ttft_ms",
    "finetuned_gen_tokens_per_s",
    "finetuned_ttft_ms",
    "merged_gen_tokens_per_s",
)
#: the lifecycle's keys, which the contract holds under ``lifecycle``
_LIFECYCLE = tuple(k for k in LifecycleCompared.__annotations__ if k != "outcome")
#: test edits: settings the 2026-11-25 probe did not record, at the values it ran with then (``TrainConfig``'s
#: defaults of that day: no automatic rows, no compilation)
_CONFIG_ADDED = {"auto_rows": False, "compile": "none"}


def _figures(measured: dict) -> dict:
    """A serving measurement of 2026-11-26 (``serving-7b-h100.json``) as ``inference.bench.measure`` writes it now:
    the batched decode under ``decode_batched`` (it was ``decode_<batch>``), and the test edits of what it did not
    record then: no fallback and no halved batch (the run had neither), the kernels the suite serves with."""
    out = {k: v for k, v in measured.items() if not k.startswith("decode_") or k in ("decode_1", "decode_batch")}
    out["decode_batched"] = measured[f"decode_{measured['decode_batch']}"]
    return {"fallback": None, "eager_1": None, "batch_halved_from": None, "kernels": SERVING_KERNELS, **out}


def to_contract(data: dict) -> dict:
    """A pre-contract run (its lifecycle's keys beside its training's, no ``outcome``) in the contract's shape: the
    lifecycle under ``lifecycle``, each serving measurement as ``_figures`` has it, and ``null`` for what this rank
    did not do then (no test hook, no resumable checkpoint, no merged weights saved). Every figure is the line's."""
    run = {k: v for k, v in data.items() if k not in _DROPPED and k not in _LIFECYCLE}
    config = {k: v for k, v in data["config"].items() if k not in ("extra", "samples")}
    lifecycle = {k: data[k] for k in _LIFECYCLE if k in data}
    lifecycle |= {"outcome": "compared", "config": {**_CONFIG_ADDED, **config}}
    lifecycle |= {"serving_base": _figures(data["serving_base"]), "serving_merged": _figures(data["serving_merged"])}
    own = {"outcome": "served", "adapter": "this GPU's own solo fine-tune, merged", **_figures(data["serving"])}
    run |= {"outcome": "run", "lifecycle": lifecycle if "serving_base" in data else None, "serving": own}
    run |= {
        "test_hook": None,
        "checkpoint": None,
        "served_weights": None,
        "compiled_layers": data.get("compiled_layers", 0),
    }
    run["phases"] = {"serving_s": 0.0, **data["phases"]}
    return run


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
        out.append(replace(record, data=to_contract(data)))
    return out
