"""Table of a ``train_sweep.sh`` folder: per run and rank, the figures that choose the GPU profile."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gpuaccept.dispatch.result import parse_records, reported_ranks

TARGET = 0.5


def main(folder: Path) -> None:
    cols = "run rank util% min% tok/s/gpu step@0.5 loss_end eval_end train_s startup_s wall_s peak_GiB compare_s phases"
    print(cols)
    for out in sorted(folder.glob("*.out")):
        text = out.read_text()
        world = max(1, len(reported_ranks(text)))
        try:
            records = parse_records("finetune", text, world, ("local",))
        except Exception as exc:
            print(out.stem, "unparsed:", exc, (out.with_suffix(".err").read_text()[-400:]))
            continue
        for rec in records:
            d = rec.data
            losses = d.get("losses") or []
            hit = next((i + 1 for i, v in enumerate(losses) if v <= TARGET), None)
            row = [
                out.stem,
                rec.rank,
                d.get("util_pct"),
                d.get("util_min_pct"),
                round(d["tokens_per_s"]) if d.get("tokens_per_s") else None,
                hit,
                d.get("train_loss_final") and round(d["train_loss_final"], 4),
                d.get("eval_loss_final") and round(d["eval_loss_final"], 4),
                d.get("train_s"),
                d.get("startup_s"),
                d.get("wall_s"),
                d.get("peak_mem_gib"),
                d.get("compare_s"),
                d.get("startup_phases_s"),
            ]
            print(" ".join(str(x) for x in row))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
