"""A neighbour process on one GPU, to make that GPU slow without touching any of its settings.

    python3 benchmarks/neighbour.py --gpu 2 --mode hbm --seconds 600      # streams HBM: 2 GiB copies in a loop
    python3 benchmarks/neighbour.py --gpu 2 --mode sm --seconds 600       # keeps the SMs busy with bf16 matmuls

What a slow GPU looks like to the suite on a shared machine: another tenant's job on the card. No clock,
power, MIG or ECC setting is changed; the process only allocates memory and launches kernels, and ends by
itself after ``--seconds`` (or when killed). It prints its own rate every 10 s, so the log says how hard
it pressed on the GPU while the suite ran.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", type=int, required=True)
    p.add_argument("--mode", choices=("hbm", "sm"), required=True)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--gib", type=float, default=2.0, help="buffer size of the copies (hbm)")
    p.add_argument("--size", type=int, default=8192, help="square matrix size (sm)")
    args = p.parse_args()
    torch.cuda.set_device(args.gpu)
    end = time.monotonic() + args.seconds
    if args.mode == "hbm":
        n = int(args.gib * 2**30) // 2
        src = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
        dst = torch.empty_like(src)
        per_op = 2 * src.numel() * 2  # read + write
    else:
        a = torch.randn(args.size, args.size, dtype=torch.bfloat16, device="cuda")
        b = torch.randn_like(a)
        per_op = 2 * args.size**3
    done, t0 = 0, time.monotonic()
    while time.monotonic() < end:
        for _ in range(20):
            if args.mode == "hbm":
                dst.copy_(src)
            else:
                torch.mm(a, b)
        torch.cuda.synchronize()
        done += 20
        now = time.monotonic()
        if now - t0 >= 10:
            unit = "TB/s" if args.mode == "hbm" else "TFLOP/s"
            print(f"neighbour gpu {args.gpu} {args.mode}: {done * per_op / (now - t0) / 1e12:.2f} {unit}", flush=True)
            done, t0 = 0, now


if __name__ == "__main__":
    main()
