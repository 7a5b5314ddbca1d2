"""The one-process GPU benchmark's output as a table: phases, matmul by size, host links alone and all at once.

    python -m gpuaccept.probes.gpubench --sizes 4096,6144,8192,10240,12288,14336,16384 > out.txt
    python benchmarks/gpubench_table.py out.txt

Reads the probe's sentinel line(s) from a file (what ``benchmarks/device_suite.sh --batch`` keeps) and
prints, per GPU, every matmul size's median TFLOP/s with its batches' spread (is the best size stable?
then fewer sizes would do), the host links each alone and all at once, and where the time went.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, as the device scripts do

from gpuaccept.dispatch.result import parse_records


def load(path: Path) -> dict[str, Any]:
    text = path.read_text()
    nodes = tuple({line.split('"node": "')[1].split('"')[0] for line in text.splitlines() if '"node": "' in line})
    (record,) = parse_records("gpubench", text, 1, nodes or ("?",))
    return record.data


def lines(data: dict[str, Any]) -> list[str]:
    phases = data.get("phases") or {}
    out = [
        "phases: "
        + ", ".join(f"{k.removesuffix('_s')} {v}" for k, v in phases.items() if isinstance(v, (int, float)))
        + f"; parts {phases.get('by_part_s')}"
    ]
    for entry in data.get("per_gpu") or []:
        matmul = entry.get("matmul") or {}
        if matmul:
            sizes = ", ".join(f"{v['size']} {v['tflops']} ({v['spread_pct']}%)" for v in matmul["sizes"])
            out.append(f"GPU {entry['index']} matmul best {matmul['best_size']}: {matmul['tflops']} TFLOP/s; {sizes}")
        host = entry.get("hostbw") or {}
        if host:
            out.append(
                f"GPU {entry['index']} host link alone: H2D {host['h2d_gbps']} GB/s ({host['h2d_spread_pct']}%), "
                f"D2H {host['d2h_gbps']} GB/s ({host['d2h_spread_pct']}%), PCIe gen {host.get('pcie_gen_loaded')} "
                f"x{host.get('pcie_width_loaded')}, NUMA {host.get('numa')}"
            )
    concurrent = data.get("hostbw_concurrent") or {}
    if concurrent:
        out.append(
            f"all {concurrent['gpus']} GPUs at once: H2D {concurrent['h2d_gbps_per_gpu']} "
            f"(sum {concurrent['h2d_gbps_total']}), D2H {concurrent['d2h_gbps_per_gpu']} "
            f"(sum {concurrent['d2h_gbps_total']}) GB/s"
        )
    pairs = (data.get("p2p") or {}).get("pairs") or []
    for pair in pairs:
        out.append(f"GPU {pair['src']} -> {pair['dst']}: {pair['gbps']} GB/s ({pair.get('spread_pct')}%)")
    return out


def main() -> None:
    for name in sys.argv[1:]:
        print(f"{name}:")
        for line in lines(load(Path(name))):
            print("  " + line)


if __name__ == "__main__":
    main()
