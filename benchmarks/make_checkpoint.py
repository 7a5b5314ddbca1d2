"""A real-scale ``--model-path`` checkpoint made on a GPU without a download: seeded random init, bf16.

    python benchmarks/make_checkpoint.py --shape 7b --out /tmp/ckpt-7b     # Qwen2-7B's shape, 6.53 B
    python benchmarks/make_checkpoint.py --shape 1.5b --out /tmp/ckpt-1.5b # Qwen2-1.5B's shape, 1.31 B

The shapes are Qwen2's published configs (Qwen/Qwen2-7B, Qwen/Qwen2-1.5B on the Hugging Face hub) with the
fixture tokenizer's 1,024-row vocabulary, so the checkpoint carries its own tokenizer and the suite reads it
as a user's checkpoint (``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer``). Built on the GPU in
bf16 (seconds), saved as safetensors with the tokenizer beside it. What the suite does with them:
docs/measurements.md '1 x H100 80GB HBM3 and 1 x H200, 2026-11-25: training at real scale'.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: Qwen2-1.5B's shape (its config.json); Qwen2-7B's is the fixture itself
SHAPES: dict[str, dict[str, int | bool]] = {
    "7b": {},
    "1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "tie_word_embeddings": True,
    },
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from gpuaccept.training.config import FIXTURES
    from gpuaccept.training.data import load_tokenizer

    tiny = json.loads((FIXTURES / "qwen2-tiny.json").read_text())
    config = AutoConfig.from_pretrained(FIXTURES / "qwen2-7b.json")
    for key, value in {**SHAPES[args.shape], "vocab_size": tiny["vocab_size"]}.items():
        setattr(config, key, value)
    config.bos_token_id, config.eos_token_id = tiny["bos_token_id"], tiny["eos_token_id"]
    started = time.monotonic()
    torch.manual_seed(args.seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    built = time.monotonic() - started
    model.save_pretrained(args.out)
    load_tokenizer(None, FIXTURES / "tokenizer.json").save_pretrained(args.out)
    params = sum(p.numel() for p in model.parameters())
    print(
        json.dumps(
            {
                "shape": args.shape,
                "params": params,
                "out": str(args.out),
                "build_s": round(built, 1),
                "save_s": round(time.monotonic() - started - built, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
