"""What the fine-tune writes of a model served (``inference.bench.measure``, ``training.lifecycle.serving``): its
prefill, its decodes, its answers; one GPU serving its own adapter, or why it could not.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.strict import strict

__all__ = [
    "Answers",
    "DecodeFigures",
    "EagerCheck",
    "Prefill",
    "ServedOwn",
    "Serving",
    "ServingFailed",
    "ServingFigures",
]


@strict
class Prefill(TypedDict):
    tokens: int
    ttft_ms: float
    tflops_per_s: float


@strict
class DecodeFigures(TypedDict):
    """``inference.bench._decode_figures``: the median run of a decode and the spread of its repeats."""

    streams: int
    step_ms: float
    step_ms_spread: list[float]
    tokens_per_s: float
    bytes_per_step: int
    read_tb_per_s: float
    steps_timed: int
    repeats: int
    capture_s: float
    checksum: str
    tokens: list[int]


@strict
class EagerCheck(TypedDict):
    tokens_equal: bool
    checksum_equal: bool
    tokens_per_s: float


@strict
class Answers(TypedDict):
    exact_match_pct: float
    token_f1_pct: float
    answers: int
    first: list[int]


@strict
class ServingFigures(TypedDict):
    """``inference.bench.measure`` and the kernels it ran under (``training.lifecycle.serving``). ``fallback``:
    why the static cache was left (None when it was not); ``eager_1``: the graph held to an eager run (None where
    none was asked for or the mode is not the graph); ``batch_halved_from``: the batch asked for when out of
    memory halved it (None when it fitted)."""

    mode: str
    dtype: str
    weight_bytes: int
    lm_head_bytes: int
    prefill: Prefill
    fallback: str | None
    decode_1: DecodeFigures
    eager_1: EagerCheck | None
    batch_halved_from: int | None
    decode_batched: DecodeFigures
    decode_batch: int
    answers: Answers
    new_tokens: int
    seconds: float
    kernels: str


@strict
class ServedOwn(ServingFigures):
    """A GPU serving the adapter it trained (``strategy.serve_own``, or a one-rank launch's lifecycle)."""

    outcome: Literal["served"]
    adapter: str


@strict
class ServingFailed(TypedDict):
    outcome: Literal["error"]
    error: str


Serving = Annotated[ServedOwn | ServingFailed, Field(discriminator="outcome")]
