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
        runs = data["strategies"] if data["outcome"] == "strategies" else {data.get("strategy"): data}
        for name, run in runs.items():
            if run is None or run["outcome"] != "run":
                print(json.dumps({"strategy": name, "run": run}))
                continue
            keep = (
                "profile compiled_layers warmup_s steps_done train_loss_final eval_loss_final tokens_per_s "
                "tokens_per_step model_tflops_per_s peak_mem_gib util_pct power_w wall_s startup_s setup_s "
                "checksum grad_ckpt"
            ).split()
            lifecycle = run["lifecycle"] or {}
            after = ("lifecycle_s", "perplexity_reduction_pct", "reload_eval_delta", "original_kept")
            print(json.dumps({"strategy": name, **{k: run[k] for k in keep}, **{k: lifecycle.get(k) for k in after}}))
            losses = run["losses"]
            print("losses every 10:", [round(v, 4) for v in losses[9::10]], "first", losses[:1])
            print("losses hex:", [float(v).hex() for v in losses])


if __name__ == "__main__":
    main()
