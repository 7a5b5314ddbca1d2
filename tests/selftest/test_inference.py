"""Inference that tests the GPU, on this machine's CPU: the decoder against transformers' own greedy decoding,
the logits checksum that one bf16 ulp in one weight changes, and the agreement judge naming the GPU whose
weights differ (``gpuaccept.inference``, ``gpuaccept.verdicts.inference``)."""

from __future__ import annotations

import pytest
import torch

from gpuaccept.inference.decode import Decoder
from gpuaccept.inference.quality import score, token_f1
from gpuaccept.verdicts.inference import Served, judge_agreement

from .h100_lines import h100_judge

pytestmark = pytest.mark.selftest

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17, 18, 19, 20, 21]]


def _tiny(dtype: torch.dtype = torch.float32):
    from transformers import AutoConfig, AutoModelForCausalLM

    from gpuaccept.training.config import FIXTURES

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(
        AutoConfig.from_pretrained(FIXTURES / "qwen2-tiny.json"), dtype=dtype
    ).eval()


@pytest.mark.parametrize("mode", ["eager", "dynamic"])
def test_left_padded_batch_decodes_as_generate_does_one_prompt_at_a_time(mode: str) -> None:
    model = _tiny()
    reference = [
        model.generate(torch.tensor([p]), max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)[0][
            len(p) :
        ].tolist()
        for p in PROMPTS
    ]
    decoder = Decoder(model, len(PROMPTS), 10, 10, 0, mode)
    first = decoder.run(PROMPTS)
    assert first.tokens == reference
    again = decoder.run(PROMPTS)  # the same decoder reused: same tokens, same checksum
    assert again.tokens == reference and again.checksum == first.checksum


def test_one_bf16_ulp_in_one_weight_changes_the_checksum_and_the_judge_names_that_gpu() -> None:
    model = _tiny(torch.bfloat16)
    runs = {}
    for gpu in ("0", "1", "2"):
        if gpu == "2":  # one ulp up in one weight of the first layer's query projection
            with torch.no_grad():
                weight = model.model.layers[0].self_attn.q_proj.weight
                bits = weight.view(torch.int16)
                bits[0, 0] += 1
        runs[gpu] = Decoder(model, 1, len(PROMPTS[0]), 12, 0, "dynamic").run([PROMPTS[0]])
    assert runs["0"].checksum == runs["1"].checksum
    assert runs["2"].checksum != runs["0"].checksum, "one bf16 ulp did not change the logits' checksum"
    served = [Served("node1", gpu, tuple(r.tokens[0]), (str(r.checksum),)) for gpu, r in runs.items()]
    judge = h100_judge()
    judged = judge_agreement(judge, served, {"node1": {}})
    assert judged == 3
    failed = [r for r in judge.results if r.verdict == "fail"]
    assert [(r.metric, r.node, r.subject) for r in failed] == [("infer_agreement_mismatch", "node1", "2")], failed
    assert failed[0].extra["first_differing_token"] is None or failed[0].extra["first_differing_token"] >= 0


def test_scores_are_squad_f1_on_token_ids() -> None:
    assert token_f1([1, 2, 3], [1, 2, 3]) == 1.0 and token_f1([4], [1]) == 0.0 and token_f1([], [1]) == 0.0
    assert token_f1([1, 2], [1, 3]) == pytest.approx(0.5)
    assert score([[1, 2], [5]], [[1, 2], [6]]) == {"exact_match_pct": 50.0, "token_f1_pct": 50.0, "answers": 2}


def test_the_solo_adapter_kept_and_served_at_the_end_gives_what_the_trained_model_gives() -> None:
    """``serve_own`` rebuilds the base from its seed, loads the adapter kept on the host and merges it: the same
    tokens and logits checksum as the trained model merged in memory (what every GPU must agree on)."""
    import torch

    from gpuaccept.training import strategy
    from gpuaccept.training.config import profile_for
    from gpuaccept.training.data import encode, load_splits, load_tokenizer
    from gpuaccept.training.lifecycle import serving
    from gpuaccept.training.model import apply_lora, build_base

    cfg = profile_for("cpu", "small", strategy="solo")
    tokenizer = load_tokenizer(None, cfg.tokenizer)
    test_ex = [e for e in (encode(tokenizer, r, cfg.seq_len) for r in load_splits(None)[1][:8]) if e]
    device = torch.device("cpu")
    trained = apply_lora(build_base(cfg, cfg.seed, device), cfg)
    with torch.no_grad():  # as if trained: every adapter weight moved
        for param in trained.parameters():
            if param.requires_grad:
                param.add_(torch.randn_like(param) * 0.05)
    strategy._keep_for_serving(cfg, trained)
    kept = strategy.serve_own(tokenizer, test_ex, device)
    direct = serving(trained.merge_and_unload(), tokenizer, test_ex, device)
    assert kept is not None and "error" not in kept, kept
    assert kept["decode_1"]["tokens"] == direct["decode_1"]["tokens"]
    assert kept["decode_1"]["checksum"] == direct["decode_1"]["checksum"]
    assert strategy.serve_own(tokenizer, test_ex, device) is None, "served twice"


def test_packed_attention_equals_transformers_own_and_the_decoder_uses_it_only_while_it_runs() -> None:
    """One query token against a grouped-query cache: the packed kernel gives transformers' repeated-heads
    result (to float32 rounding), prompts keep transformers' path, and the model's attention is restored."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from gpuaccept.inference import kernels

    class Layer(torch.nn.Module):
        num_key_value_groups = 4
        is_causal = True

    torch.manual_seed(0)
    query, key, value = torch.randn(3, 8, 1, 16), torch.randn(3, 2, 11, 16), torch.randn(3, 2, 11, 16)
    mask = torch.rand(3, 1, 1, 11) > 0.3
    mask[..., -1] = True
    packed, _ = kernels._packed_gqa_attention(Layer(), query, key, value, mask, scaling=0.25)
    own, _ = sdpa_attention_forward(Layer(), query, key, value, mask, scaling=0.25)
    assert packed.shape == own.shape == (3, 1, 8, 16)
    torch.testing.assert_close(packed, own)
    model = _tiny()
    seen: list[tuple[int, ...]] = []
    original = kernels._packed_gqa_attention

    def spy(module, query, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(tuple(query.shape))
        return original(module, query, *args, **kwargs)

    kernels._packed_gqa_attention = spy
    try:
        Decoder(model, len(PROMPTS), 10, 6, 0, "eager").run(PROMPTS)
    finally:
        kernels._packed_gqa_attention = original
    layers = model.config.num_hidden_layers
    assert [s[2] for s in seen] == [10] * layers + [1] * 5 * layers  # the prompt, then 5 one-token steps
    assert model.config._attn_implementation == "sdpa"
