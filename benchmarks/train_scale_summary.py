"""One line per fine-tune run from a probe's output: what ``train_scale_device.sh`` prints.

python benchmarks/train_scale_summary.py OUT.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuaccept.dispatch.result import parse_records


def main() -> None:
    text = Path(sys.argv[1]).read_text()
    for record in parse_records("finetune", text, 1, ()):
        data = record.data
        runs = data.get("strategies") or {data.get("strategy"): data}
        for name, run in runs.items():
            keep = (
                "profile compiled_layers warmup_s steps_done train_loss_final eval_loss_final tokens_per_s "
                "tokens_per_step model_tflops_per_s peak_mem_gib util_pct power_w wall_s startup_s setup_s "
                "lifecycle_s checksum grad_ckpt "
                "base_gen_tokens_per_s finetuned_gen_tokens_per_s base_ttft_ms finetuned_ttft_ms "
                "perplexity_reduction_pct reload_eval_delta original_kept"
            ).split()
            print(json.dumps({"strategy": name, **{k: run.get(k) for k in keep}}))
            losses = run.get("losses") or []
            print("losses every 10:", [round(v, 4) for v in losses[9::10]], "first", losses[:1])
            print("losses hex:", [float(v).hex() for v in losses])


if __name__ == "__main__":
    main()
