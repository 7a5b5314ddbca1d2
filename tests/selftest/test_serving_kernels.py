"""Serving keeps deterministic algorithms for what computes and writes the KV cache with the plain kernel.

Under ``torch.use_deterministic_algorithms(True)`` (the fine-tune's mode, left on while serving) a static
cache's ``index_copy_`` becomes a sort-based ``index_put_``; ``gpuaccept.inference.kernels`` has every layer's
write (and the decoder's token write) dispatch the plain kernel instead, which cannot change the result: each
step writes distinct slots. Held here on the CPU: the same tokens and logits checksum with and without
deterministic algorithms, the cache's layers wrapped, the mode restored after every write.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuaccept.inference.decode import Decoder  # noqa: E402
from gpuaccept.inference.kernels import plain_writes, serving_kernels, unsorted_cache_writes  # noqa: E402


def _model():
    config = transformers.Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(3)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def test_plain_writes_give_the_deterministic_result_and_restore_the_mode():
    model = _model()
    prompts = [[5, 6, 7, 8], [9, 10]]
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(False)
        free = Decoder(model, 2, 4, 6, 0, "eager").run(prompts)
        torch.use_deterministic_algorithms(True)
        with serving_kernels() as kernels:
            decoder = Decoder(model, 2, 4, 6, 0, "eager")
            strict = decoder.run(prompts)
            assert torch.are_deterministic_algorithms_enabled(), "serving keeps deterministic algorithms"
            assert not torch.utils.deterministic.fill_uninitialized_memory
        assert torch.utils.deterministic.fill_uninitialized_memory, "the NaN fills are back after serving"
        assert "plain kernel" in kernels
        assert (strict.tokens, strict.checksum) == (free.tokens, free.checksum)
        assert unsorted_cache_writes(decoder.cache) == 0, "every layer was wrapped once, when the cache was made"
        assert all(getattr(layer.update, "_gpuaccept_plain", False) for layer in decoder.cache.layers)
        with plain_writes():
            assert not torch.are_deterministic_algorithms_enabled()
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(was)
