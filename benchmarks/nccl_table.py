"""The NCCL probe's output (every rank's line, e.g. from torchrun) as busbw at each collective's largest size.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpuaccept.probes.nccl \
        --max-bytes 2G --iters 10 --warmup 3 > nccl.out
    python benchmarks/nccl_table.py nccl.out

For the NCCL section's time budget: what busbw a shorter sweep reads (largest size, launches per
timed loop, warm-up launches), to hold against the suite's default sweep (8 GiB, 20 x 3 timed, 5 warm-up).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, as the device scripts do

from gpuaccept.contracts.nccl_formulas import COLLECTIVES
from gpuaccept.contracts.nccl_sweep import format_bytes, group_tables
from gpuaccept.dispatch.result import parse_records


def main() -> None:
    for name in sys.argv[1:]:
        text = Path(name).read_text()
        ranks = text.count("GPUACCEPT_RESULT ") + len(
            {ln.split()[1] for ln in text.splitlines() if ln.startswith("GPUACCEPT_PART ")}
        )
        nodes = tuple({ln.split('"node": "')[1].split('"')[0] for ln in text.splitlines() if '"node": "' in ln}) or (
            "?",
        )
        records = parse_records("nccl", text, ranks, nodes)
        print(f"{name}: {ranks} ranks")
        for table in group_tables(records):
            for collective in COLLECTIVES:
                row = table.largest(collective)
                if row is not None:
                    spread = ""
                    times = list(row.rank_time_us.values())
                    if times:
                        spread = f", rank times {min(times):.0f}-{max(times):.0f} us"
                    print(f"  {collective:<15} {format_bytes(row.size):>8} busbw {row.busbw:8.2f} GB/s{spread}")
        phases = (records[0].data.get("phases") or {}) if records else {}
        if phases:
            print(f"  phases (rank 0): {phases}")


if __name__ == "__main__":
    main()
