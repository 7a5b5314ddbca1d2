"""RDMA write bandwidth and latency per HCA between node pairs, with perftest's ib_write_bw / ib_write_lat.

One task per node per round (``gpuaccept.fabric.schedule`` makes the rounds). ``--plan`` lists the
round's tests as ``server_node/hca>client_node/hca@port``; this task runs every test its node takes
part in at once, one thread per HCA (each HCA is in at most one test per round): as server it
starts ``ib_write_bw -d HCA -p PORT`` and waits for the client; as client it connects to the server
node, retrying while the server is not yet listening. Then the same pair runs ``ib_write_lat`` on
``PORT + 64``. Every perftest process has a deadline and is killed past it.

Memory: ``--gpu-memory`` puts the buffers in the GPU nearest the HCA on the PCIe tree
(``--use_cuda_bus_id``, GPUDirect RDMA); otherwise host memory. The result says which. Latency runs
from host memory always (perftest refuses device memory for write latency without
``--write_with_imm``, and peers such as imbue's cluster-health measure it that way).

Emits per endpoint: role, partner, the parsed report of each tool (``gpuaccept.fabric.perftest``),
the memory used, and the tail of the raw output. A node without the tools reports ``missing`` with
the install hint instead of measuring. By hand, two shells on two nodes::

    python -m gpuaccept.probes.perftest --plan 'gpu-a01/mlx5_0>gpu-a02/mlx5_0@18515'
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpuaccept.fabric.gdr import nearest
from gpuaccept.fabric.perftest import PerftestError, failure_kind, parse_bw, parse_lat, supports_cuda
from gpuaccept.fabric.schedule import Pairing, assignments, parse_plan
from gpuaccept.probes._pci import chain, gpus, hca_bdf
from gpuaccept.probes._protocol import emit, node_name

__all__ = ["main"]

INSTALL_HINT = (
    "install perftest on every node (Debian/Ubuntu: apt-get install perftest; RHEL: dnf install perftest); "
    "GPUDirect tests need a CUDA build of perftest (NVIDIA DOCA/MLNX_OFED ships one)"
)
TOOLS = ("ib_write_bw", "ib_write_lat")


def _address(node: str) -> str:
    """Where the server node listens: its name resolved, else Slurm's NodeAddr, else the name itself."""
    try:
        return socket.gethostbyname(node)
    except OSError:
        pass
    try:
        out = subprocess.run(["scontrol", "show", "node", node, "-o"], capture_output=True, text=True, timeout=10)
        for token in out.stdout.split():
            if token.startswith("NodeAddr="):
                return token.split("=", 1)[1]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return node


def _run(argv: list[str], deadline: float) -> tuple[int | None, str]:
    """Run ``argv`` in its own process group until it exits or ``deadline``; (exit code or None, output)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out + f"\n[gpuaccept] killed: no result within the deadline ({argv[0]})"


def _tool(
    name: str, role: str, hca: str, port: int, server: str, extra: list[str], deadline: float
) -> tuple[int | None, str]:
    """One perftest run; a client retries while the server is not listening yet."""
    argv = [name, "-d", hca, "-p", str(port), "-F", *extra] + ([server] if role == "client" else [])
    while True:
        code, out = _run(argv, deadline)
        if role == "server" or code == 0 or "Couldn't connect" not in out or time.monotonic() > deadline - 2:
            return code, out
        time.sleep(0.5)


def _gpu_bus(root: Path, hca: str) -> str | None:
    """The PCI address of the GPU nearest ``hca`` on the PCIe tree (the one GPUDirect should use)."""
    bdf = hca_bdf(root, hca)
    cards = {g: chain(root, g) for g in gpus(root)}
    if bdf is None or not cards:
        return None
    hca_chain = chain(root, bdf)
    best, _ = nearest(hca_chain, cards)
    return best[0] if best else None


def _endpoint(role: str, test: Pairing, args: argparse.Namespace, gpu_bus: str | None) -> dict[str, Any]:
    me, other = (test.server, test.client) if role == "server" else (test.client, test.server)
    started = time.monotonic()
    deadline = started + args.timeout
    server = _address(test.server[0])
    out: dict[str, Any] = {
        "hca": me[1],
        "role": role,
        "partner": f"{other[0]}/{other[1]}",
        "port": test.port,
        "memory": "cuda" if gpu_bus else "host",
        "gpu_bus": gpu_bus,
        "server_addr": server,
        "bw": None,
        "lat": None,
        "error": None,
    }
    bw_extra = ["--report_gbits", "-s", str(args.size), "-D", str(args.duration)]
    if gpu_bus:
        bw_extra.append(f"--use_cuda_bus_id={gpu_bus}")
    code, text = _tool("ib_write_bw", role, me[1], test.port, server, bw_extra, deadline)
    out["bw_tail"] = "\n".join(text.strip().splitlines()[-14:])
    try:
        out["bw"] = parse_bw(text)
    except PerftestError:
        out["error"] = f"ib_write_bw {'exit ' + str(code) if code is not None else 'timed out'}: {failure_kind(text)}"
    lat_deadline = time.monotonic() + args.timeout
    code, text = _tool(
        "ib_write_lat", role, me[1], test.lat_port, server, ["-s", "2", "-n", str(args.lat_iters)], lat_deadline
    )
    out["lat_tail"] = "\n".join(text.strip().splitlines()[-8:])
    try:
        out["lat"] = parse_lat(text)
    except PerftestError:
        why = f"ib_write_lat {'exit ' + str(code) if code is not None else 'timed out'}: {failure_kind(text)}"
        out["error"] = f"{out['error']}; {why}" if out["error"] else why
    out["seconds"] = round(time.monotonic() - started, 2)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True, help="this round: server_node/hca>client_node/hca@port,...")
    p.add_argument("--gpu-memory", action="store_true", help="GPUDirect: buffers in the GPU nearest each HCA")
    p.add_argument("--size", type=int, default=8388608, help="ib_write_bw message bytes (Azure's check: 8 MiB)")
    p.add_argument("--duration", type=int, default=5, help="ib_write_bw seconds (-D)")
    p.add_argument("--lat-iters", type=int, default=10000, help="ib_write_lat iterations (-n)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds each tool may take before it is killed")
    p.add_argument("--sysfs-root", type=Path, default=Path("/sys"))
    args = p.parse_args(argv)
    node = node_name()
    mine = assignments(parse_plan(args.plan)).get(node, [])
    data: dict[str, Any] = {
        "outcome": "ran",
        "plan_tests": len(parse_plan(args.plan)),
        "endpoints": [],
        "missing": [],
        "hint": None,
        "cuda_build": None,
    }
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not mine:
        data["outcome"] = "idle"
    elif missing:
        data.update(outcome="missing", missing=missing, hint=INSTALL_HINT)
    else:
        help_text = subprocess.run(["ib_write_bw", "-h"], capture_output=True, text=True, timeout=10).stdout
        data["cuda_build"] = supports_cuda(help_text)
        if args.gpu_memory and not data["cuda_build"]:
            data.update(outcome="missing", missing=["ib_write_bw --use_cuda"], hint=INSTALL_HINT)
        else:
            jobs = [(role, test, test.server[1] if role == "server" else test.client[1]) for role, test in mine]
            buses = {hca: _gpu_bus(args.sysfs_root, hca) if args.gpu_memory else None for _, _, hca in jobs}
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                futures = [pool.submit(_endpoint, role, test, args, buses[hca]) for role, test, hca in jobs]
                data["endpoints"] = [f.result() for f in futures]
    emit(data, probe="perftest")


if __name__ == "__main__":
    main()
