"""The lent H100's real fine-tune result lines, and a judge that takes every node for an H100 SKU.

Shared by the selftests that judge the 7B-class runs from those lines (``test_training_scale.py``, one GPU;
``test_training_scale_node.py``, an 8-GPU node built from them).
"""

from __future__ import annotations

from gpuaccept.dispatch.result import RankRecord, parse_records
from gpuaccept.judging.judge import Judge
from gpuaccept.thresholds.loader import load_thresholds
from gpuaccept.training.config import FIXTURES

__all__ = ["h100_judge", "h100_run"]


def h100_run(fixture: str) -> list[RankRecord]:
    """A fine-tune's result line as the probe printed it on the lent H100 (2026-11-25; docs/measurements.md
    'Training at real scale'): ``finetune-scale-h100.out`` (``benchmarks/train_scale_device.sh det``, run a),
    ``finetune-pretrained-6.5b-h100.out`` (the 6.53 B checkpoint's ``--model-path`` probe by hand)."""
    return parse_records("finetune", (FIXTURES / fixture).read_text(), 1, ())


def h100_judge() -> Judge:
    """A judge with the packaged thresholds that takes every node for an H100 SXM."""
    return Judge(load_thresholds(), lambda node: "H100-SXM-80GB", lambda result: None, "selftest")
