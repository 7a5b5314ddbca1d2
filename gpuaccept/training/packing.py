"""Training rows packed to the sequence length: whole examples laid end to end, no padding between them.

Why: the built-in data's conversations are 55-84 tokens; padded one per row, a 7B model trains a few hundred tokens per
step and the GPU waits on kernel launches (21% busy measured, docs/measurements.md '1 x H100 80GB HBM3 and 1 x H200,
2026-11-25: training at real scale'). Packed, every step trains ``batch_size x seq_len`` tokens.

Packed rows attend across their examples' boundaries (one causal mask over the row, the flash kernel of
``scaled_dot_product_attention``; position ids run on through the row). Why that is acceptable here:
the loss is taken on answer tokens only, and each answer still sees its own system prompt and question
right before it; what an example additionally sees is earlier conversations of the same set, as in
pretraining's packed documents and TRL's ``packing=True`` before padding-free attention. A per-example
mask would force sdpa off its flash kernel onto a slower masked one for no change in what is measured.
Evaluation, reload and generation use single unpacked examples (``gpuaccept.training.data``), so the
eval loss is each conversation's own. An example is never split across rows: an answer without its
question would teach noise; the row's tail is padding (label -100), at most one example long.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DistributedSampler

from gpuaccept.training.data import Example

__all__ = ["PackedBatch", "packed_batches"]

PackedBatch = tuple[dict[str, torch.Tensor], int]


def _rows(order: Iterator[int], examples: list[Example], seq_len: int) -> Iterator[tuple[list[int], list[int]]]:
    ids: list[int] = []
    labels: list[int] = []
    for index in order:
        example = examples[index]
        if ids and len(ids) + len(example["input_ids"]) > seq_len:
            yield ids, labels
            ids, labels = [], []
        ids += example["input_ids"][:seq_len]
        labels += example["labels"][:seq_len]
    if ids:
        yield ids, labels


def packed_batches(
    examples: list[Example], batch_size: int, seq_len: int, rank: int, world: int, seed: int, pad_id: int
) -> Iterator[PackedBatch]:
    """Endless ``(batch, tokens)`` for this rank: ``batch_size`` rows of exactly ``seq_len`` tokens and the
    count of real (unpadded) tokens in them. This rank's examples come from ``DistributedSampler`` epochs
    (each rank its own shard, reshuffled every epoch), chained end to end, so a small set repeats as many
    epochs as the run needs."""
    indices: Any = range(len(examples))  # a sized sequence is all DistributedSampler reads
    sampler: DistributedSampler[int] = DistributedSampler(
        indices, num_replicas=world, rank=rank, shuffle=True, seed=seed
    )

    def order() -> Iterator[int]:
        epoch = 0
        while True:
            sampler.set_epoch(epoch)
            yield from sampler
            epoch += 1

    rows = _rows(order(), examples, seq_len)
    while True:
        ids = torch.full((batch_size, seq_len), pad_id, dtype=torch.long)
        labels = torch.full((batch_size, seq_len), -100, dtype=torch.long)
        tokens = 0
        for row in range(batch_size):
            row_ids, row_labels = next(rows)
            ids[row, : len(row_ids)] = torch.tensor(row_ids)
            labels[row, : len(row_labels)] = torch.tensor(row_labels)
            tokens += len(row_ids)
        yield {"input_ids": ids, "labels": labels}, tokens
