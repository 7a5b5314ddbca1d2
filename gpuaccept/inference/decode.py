"""Greedy decoding at serving speed: a static KV cache and the one-token step captured in a CUDA graph.

Why not ``model.generate``: eager decoding with the dynamic cache times Python and kernel launches (about 10%
of an H100's HBM bandwidth for a 7B model at batch 1), so a GPU that decodes slowly for any reason hides behind
the host. transformers' static cache compiled by ``torch.compile`` reaches ~42% but compiles for 35-90 s a shape.
Capturing the eager static-cache step in a CUDA graph costs a second and removes the launches the same way;
the kernels stay the eager ones, so the graph's tokens can be held against an eager run of the same step.

The step runs whole inside the graph: the attention mask gains the new slot, the model's forward, the greedy
token, a checksum of the logits' bits, and the counters moving on; a replay is one launch. Left padding lets a
batch of prompts of different lengths share one cache: every stream writes slot ``s`` at step ``s``, its own
positions count only its real tokens, and its padded slots are masked out of attention (a padded query attends
to itself alone, so nothing in the cache is NaN).

Modes: ``graph`` (GPUs), ``eager`` (the same static-cache step without the graph: the reference the graph's
tokens must equal, and the unmerged adapter's speed), ``dynamic`` (transformers' dynamic cache, eager: CPUs,
and architectures whose static cache fails, named by the caller).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gpuaccept.inference.kernels import packed_gqa, plain_writes, unsorted_cache_writes

__all__ = ["MODES", "DecodeRun", "Decoder", "logits_fold"]

MODES = ("graph", "eager", "dynamic")


def logits_fold(logits: torch.Tensor) -> torch.Tensor:
    """An int64 fold of the logits' bits: any bit that differs changes it (one bf16 ulp in one logit does),
    order-free (integer sums are exact however a GPU reduces them), on the device (no copy per step)."""
    flat = logits.detach().contiguous()
    bits = flat.view(torch.int16 if flat.element_size() == 2 else torch.int32).reshape(flat.shape[0], -1)
    weights = torch.arange(1, 2 * bits.shape[1], 2, device=bits.device, dtype=torch.int64)
    return (bits.to(torch.int64) * weights).sum()


@dataclass
class DecodeRun:
    """One batch decoded: the tokens, the logits' checksum, and where the time went."""

    tokens: list[list[int]]
    checksum: int
    #: the timed steps (replays in graph mode, after one untimed warm-up step) and their wall time
    steps: int
    decode_s: float
    #: per stream, its context (real tokens) at each timed step: the KV bytes a step reads
    contexts: list[int] = field(default_factory=list)
    capture_s: float = 0.0

    @property
    def step_s(self) -> float:
        return self.decode_s / self.steps if self.steps else float("nan")


class Decoder:
    """A batch of ``batch`` prompts of at most ``prompt_len`` tokens, decoded greedily for exactly
    ``new_tokens`` (no early stop: every step costs the same, and an answer is cut at EOS afterwards).

    ``run`` may be called again with other prompts of the same shape: the cache, the buffers and the captured
    graph are reused, so one capture serves the timed repeats and every batch of the test split.
    """

    def __init__(
        self, model: nn.Module, batch: int, prompt_len: int, new_tokens: int, pad_id: int, mode: str = "graph"
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        if new_tokens < 3:
            raise ValueError("new_tokens: at least 3 (the prefill's token, the warm-up step, a timed step)")
        self.model, self.mode = model, mode
        self.batch, self.prompt_len, self.new_tokens, self.pad_id = batch, prompt_len, new_tokens, pad_id
        self.length = prompt_len + new_tokens
        self.device = next(model.parameters()).device
        dev = self.device
        self.valid = torch.zeros(batch, self.length, dtype=torch.bool, device=dev)
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.slot = torch.zeros(1, dtype=torch.long, device=dev)
        self.tokens = torch.zeros(batch, new_tokens, dtype=torch.long, device=dev)
        self.fold = torch.zeros((), dtype=torch.int64, device=dev)
        self.cache: Any = None
        self.graph: torch.cuda.CUDAGraph | None = None

    def _new_cache(self) -> Any:
        from transformers import DynamicCache, StaticCache

        config: Any = self.model.config
        if self.mode == "dynamic":
            return DynamicCache(config=config)
        cache = StaticCache(config=config, max_cache_len=self.length)
        unsorted_cache_writes(cache)  # one slot a step: the plain write, also under deterministic algorithms
        return cache

    def _mask(self, queries: int) -> torch.Tensor:
        """(batch, 1, queries, keys) bool, True = attend: causal, real keys only, every query its own slot."""
        keys = self.length if self.mode != "dynamic" else int(self.slot.item()) + queries
        first = keys - queries if self.mode == "dynamic" else int(self.slot.item())
        q = torch.arange(first, first + queries, device=self.device)[:, None]
        k = torch.arange(keys, device=self.device)[None, :]
        allowed = (k <= q)[None] & self.valid[:, None, :keys]
        return (allowed | (k == q)[None])[:, None]

    def _prefill(self, prompts: Sequence[Sequence[int]]) -> None:
        """Left-pad the prompts into the batch, run the prompt through the model, keep its greedy token."""
        if len(prompts) != self.batch or max(len(p) for p in prompts) > self.prompt_len:
            raise ValueError(
                f"{len(prompts)} prompts of up to {max(map(len, prompts))} tokens for a decoder of "
                f"{self.batch} x {self.prompt_len}"
            )
        width = self.prompt_len
        ids = torch.full((self.batch, width), self.pad_id, dtype=torch.long)
        self.valid.zero_()
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.long)
            self.valid[row, width - len(prompt) : width] = True
        ids = ids.to(self.device)
        positions = (self.valid[:, :width].long().cumsum(-1) - 1).clamp(min=0)
        if self.cache is None or self.mode == "dynamic":
            self.cache = self._new_cache()
        else:
            self.cache.reset()  # newer transformers count the cache's length inside it (a device counter)
        self.slot.zero_()
        out = self.model(
            input_ids=ids,
            attention_mask=self._mask(width),
            position_ids=positions,
            past_key_values=self.cache,
            cache_position=torch.arange(width, device=self.device),
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1]
        first = logits.argmax(-1)
        self.fold.copy_(logits_fold(logits))
        self.tokens.zero_()
        self.tokens[:, 0] = first
        self.ids.copy_(first[:, None])
        self.pos.copy_(positions[:, -1:] + 1)
        self.slot.fill_(width)

    def _step(self) -> None:
        """One token for every stream; everything it changes is a buffer, so a graph can replay it."""
        if self.mode == "dynamic":
            mask = self._mask(1)  # the dynamic cache grows: its mask is rebuilt each step (eager anyway)
            self.valid[:, int(self.slot.item())] = True
            mask[..., -1] = True
        else:
            self.valid.index_fill_(1, self.slot, True)
            mask = self.valid[:, None, None, :]
        out = self.model(
            input_ids=self.ids,
            attention_mask=mask,
            position_ids=self.pos,
            past_key_values=self.cache,
            cache_position=self.slot,
            use_cache=True,
            logits_to_keep=1,
        )
        logits = out.logits[:, -1]
        nxt = logits.argmax(-1)
        self.fold.add_(logits_fold(logits))
        with plain_writes():  # one column a step: the plain kernel, also under deterministic algorithms
            self.tokens.index_copy_(1, self.slot - (self.prompt_len - 1), nxt[:, None])
        self.ids.copy_(nxt[:, None])
        self.pos.add_(1)
        self.slot.add_(1)

    def _capture(self) -> float:
        """Capture ``_step`` once (after a real step ran eagerly on a side stream, as CUDA graphs need). A capture
        records the kernels without running them: the buffers stay as the warm-up step left them."""
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        # thread-local: the fine-tune's NCCL watchdog and the NVML sampler keep running in other threads, and
        # under the default global mode a CUDA call of theirs during the capture invalidates it
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._step()
        self.graph = graph
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - started

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.no_grad()
    def run(self, prompts: Sequence[Sequence[int]]) -> DecodeRun:
        """Prefill, then ``new_tokens - 1`` steps: in graph mode the first runs eagerly on a side stream (the
        warm-up a capture needs), is captured once per decoder, and the rest are replays, timed together. The
        steps' attention reads each cached key and value once (``kernels.packed_gqa``)."""
        with packed_gqa(self.model):
            return self._run(prompts)

    def _run(self, prompts: Sequence[Sequence[int]]) -> DecodeRun:
        lengths = [len(p) for p in prompts]
        self._sync()
        self._prefill(prompts)
        self._sync()
        capture_s = 0.0
        first_timed = 1
        if self.mode == "graph":
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                self._step()
            torch.cuda.current_stream(self.device).wait_stream(stream)
            if self.graph is None:
                capture_s = self._capture()
            first_timed = 2
        self._sync()
        started = time.perf_counter()
        for _ in range(first_timed, self.new_tokens):
            if self.graph is not None:
                self.graph.replay()
            else:
                self._step()
        self._sync()
        decode_s = time.perf_counter() - started
        contexts = [sum(n + k for n in lengths) for k in range(first_timed, self.new_tokens)]
        return DecodeRun(
            tokens=self.tokens.tolist(),
            checksum=int(self.fold.item()),
            steps=self.new_tokens - first_timed,
            decode_s=decode_s,
            contexts=contexts,
            capture_s=capture_s,
        )
