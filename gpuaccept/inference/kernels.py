"""The kernels a model is served with: the fastest that still give every GPU of a SKU the same tokens.

The fine-tune runs with ``torch.use_deterministic_algorithms(True)`` (bit-identical training on every GPU of a
SKU and stack). Left as it is while serving, it slows decoding by 21% on an H100 and 25% on an H200, in two
places (docs/measurements.md '4 x H200 SXM 141GB, 2026-11-27: time limits from the plan,
serving kernels, a slow GPU'): every new tensor is NaN-filled
(``torch.utils.deterministic.fill_uninitialized_memory``), and the static KV cache's ``index_copy_`` (and the
decoder's own token write) become a sort-based ``index_put_``. Neither is needed for identical results: a
NaN fill only touches memory that is written before it is read, and an ``index_copy_`` to distinct positions
(one slot per step) has only one possible result, whichever kernel writes it. So serving keeps deterministic
algorithms on for everything that computes (matrix products, attention), drops the fills, and writes the
cache and the tokens with ``index_copy_``'s plain kernel.

Attention of one new token against a grouped-query cache (7 query heads share each key/value head in the 7B
shape): transformers' SDPA path copies every layer's keys and values out to one per query head before the
kernel when a mask is given (``repeat_kv``, three copies a layer). ``packed_gqa`` instead lays a head group's
queries out as that key/value head's queries, so the kernel reads each cached key and value once, with the same
logits to the bit; batch 32 then decodes 1.45x faster (docs/measurements.md '1 x H100 80GB HBM3 and 1 x H200 SXM
141GB, 2026-11-27: batch-32 decode with packed attention'). transformers does the same for one query token from
5.2x (``pack_gqa`` in ``transformers/integrations/sdpa_attention.py``). Prompts (more than one query token) keep
transformers' own path.

Default kernels throughout were measured too: as fast, and bit-identical on four H200s in a fresh process, but the
suite's own serving after the fine-tune gave four different batch-32 checksums on the same four GPUs
(docs/measurements.md '4 x H200 SXM 141GB, 2026-11-27: time limits from the plan, serving kernels, a slow GPU'): not
reproducible where the suite serves, so not used. The agreement check (every GPU's tokens and logits checksum,
``gpuaccept.verdicts.inference.judge_agreement``) and graph against eager hold the result on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.utils.deterministic

__all__ = ["SERVING_KERNELS", "packed_gqa", "plain_writes", "serving_kernels", "unsorted_cache_writes"]

#: What the record says the model was served with
SERVING_KERNELS = (
    "deterministic algorithms without NaN fills; cache and token writes by index_copy_'s plain kernel; "
    "one-token attention with each key/value head's query group packed (no repeated keys and values)"
)
#: The name the packed attention is registered under in transformers' attention functions
PACKED_GQA = "gpuaccept_sdpa_packed_gqa"


@contextmanager
def serving_kernels() -> Iterator[str]:
    """NaN fills of new tensors off for the block (deterministic algorithms stay as they are), as before after."""
    was = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        yield SERVING_KERNELS
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = was  # type: ignore[attr-defined]


@contextmanager
def plain_writes() -> Iterator[None]:
    """Deterministic algorithms off for a write to distinct positions (its result is the same either way):
    PyTorch then dispatches ``index_copy_``'s plain kernel instead of a sort-based ``index_put_``. A host-side
    switch only: inside a CUDA graph capture, the captured kernel is the plain one."""
    was = torch.are_deterministic_algorithms_enabled()
    if not was:
        yield
        return
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)


def unsorted_cache_writes(cache: Any) -> int:
    """Every layer of a transformers static cache writes its keys and values under ``plain_writes``; returns
    how many layers it wrapped (0 for a cache without per-layer ``update``: it keeps its own writes)."""
    wrapped = 0
    for layer in getattr(cache, "layers", None) or ():
        update = getattr(layer, "update", None)
        if update is None or getattr(update, "_gpuaccept_plain", False):
            continue
        layer.update = _plain(update)
        wrapped += 1
    return wrapped


def _plain(update: Callable[..., Any]) -> Callable[..., Any]:
    def write(*args: Any, **kwargs: Any) -> Any:
        with plain_writes():
            return update(*args, **kwargs)

    write._gpuaccept_plain = True  # type: ignore[attr-defined]
    return write


def _packed_gqa_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA for one query token with a key/value head's query heads as its queries: (batch, heads, 1, dim) ->
    (batch, kv_heads, groups, dim) against the cache's (batch, kv_heads, length, dim), mask (batch, 1, 1, length)
    broadcast over both. Anything else (prompts, no grouping) goes to transformers' own SDPA function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    if query.shape[2] != 1 or groups == 1 or (attention_mask is not None and attention_mask.shape[1] != 1):
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)  # type: ignore[no-any-return]
    batch, heads, _, dim = query.shape
    packed = query.reshape(batch, heads // groups, groups, dim)
    out = torch.nn.functional.scaled_dot_product_attention(packed, key, value, attn_mask=attention_mask, scale=scaling)
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


@contextmanager
def packed_gqa(model: Any) -> Iterator[bool]:
    """The model's attention switched to ``_packed_gqa_attention`` for the block when it runs transformers' SDPA
    (other implementations are left alone); yields whether it switched. A CUDA graph captured inside keeps the
    packed kernels for its replays."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        yield False
        return
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import sdpa_mask
    except ImportError:  # a transformers without pluggable attention: its own SDPA path, unpacked
        yield False
        return
    AttentionInterface.register(PACKED_GQA, _packed_gqa_attention)
    AttentionMaskInterface.register(PACKED_GQA, sdpa_mask)
    config._attn_implementation = PACKED_GQA
    try:
        yield True
    finally:
        config._attn_implementation = "sdpa"
