"""Collective bandwidth and correctness over torch.distributed: NCCL on GPUs, gloo on CPU nodes.

Why: the interconnect (NVLink inside a node, the fabric between nodes) is what a training job waits on,
and a link or NIC that is slow, mis-cabled or silently corrupting data is invisible to single-GPU checks.
One rank per GPU (one srun task per GPU) runs all_reduce, all_gather, reduce_scatter, alltoall and
broadcast over a message-size sweep, timed the way nccl-tests times them (warm-up, then a loop of
``--iters`` launches between two device synchronisations, per-rank median over ``--trials`` loops), and
checks every result numerically after the timing (rank- and block-dependent values, exact in float32).

``--groups "n1,n2;n3,n4"`` splits the ranks by node into communicators measured side by side (a scale
of the multi-node test, or the bad-node pairs). ``--rails all`` (or ``--rails 0,3``) further splits every
group by local rank: one GPU per node per communicator, all rails at once, which is nccl-tests'
``NCCL_TESTS_SPLIT="MOD <ranks per node>"`` (``gpuaccept.fabric.rails``); each rank then reports its rail.
Every step runs under a watchdog: a collective that does not finish within ``--op-timeout`` seconds
ends all ranks with status 124 and one line naming the ranks and nodes behind. With NCCL,
``NCCL_DEBUG=INFO`` goes to one file per rank, parsed into the record (version, network, NICs,
transports, algorithm/protocol per size, each rank's NET channels); ``--ring`` forces ``NCCL_ALGO=Ring``.

By hand, 8 GPUs of one node: ``torchrun --nproc-per-node 8 -m gpuaccept.probes.nccl --max-bytes 1G``.
Test-only faults (refused unless GPUACCEPT_SELFTEST=1): GPUACCEPT_FAULT_SLOW_NODE=<node> (+ _SLOW_S,
sleep per launch), GPUACCEPT_FAULT_HANG_RANK=<rank>, GPUACCEPT_FAULT_CORRUPT_RANK=<rank> (a rank of the step, or
``<node>:<rank on that node>``: that node alone, in every step it takes part in).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, cast

from gpuaccept.contracts.nccl_formulas import COLLECTIVES, busbw_gbs
from gpuaccept.contracts.nccl_payloads import CappedSizes, FirstWrong, NcclInGroup, NcclRow
from gpuaccept.contracts.nccl_sweep import cap_sizes, format_bytes, parse_bytes, requested_sizes, sweep_sizes
from gpuaccept.fabric.rails import parse_rails, split_rails
from gpuaccept.nccl import patterns
from gpuaccept.nccl.ncclinfo import collect_facts, debug_env
from gpuaccept.nccl.watchdog import Watchdog
from gpuaccept.probes._nccl_faults import selftest_faults
from gpuaccept.probes._protocol import emit, gpu_identity, node_name, rank_info

__all__ = ["main"]

_CHUNK = 1 << 26  # elements compared at once when verifying (bounds the temporary mask)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated subset")
    p.add_argument("--min-bytes", type=parse_bytes, default=1 << 20)
    p.add_argument("--max-bytes", type=parse_bytes, default=8 << 30, help="capped by free memory")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=20, help="launches per timed loop (nccl-tests -n)")
    p.add_argument("--warmup", type=int, default=5, help="untimed launches per size (nccl-tests -w)")
    p.add_argument("--trials", type=int, default=3, help="timed loops per size; the median is kept")
    p.add_argument("--op-timeout", type=float, default=120.0, help="seconds one collective+size may take")
    p.add_argument("--groups", default="", help="node groups measured side by side: 'a,b;c,d'")
    p.add_argument("--rails", default="", help="split groups by local rank: 'all' or '0,3' (one GPU per node)")
    p.add_argument("--ring", action="store_true", help="force NCCL_ALGO=Ring (inter-node busbw = network)")
    p.add_argument("--no-nccl-debug", action="store_true", help="do not capture NCCL_DEBUG=INFO")
    p.add_argument("--nccl-log-dir", default="", help="keep the per-rank NCCL logs here")
    p.add_argument("--mem-fraction", type=float, default=0.75, help="share of free memory buffers may use")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    args = p.parse_args(argv)
    args.collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    try:
        args.rail_set = parse_rails(args.rails)
    except ValueError as exc:
        p.error(str(exc))
    unknown = set(args.collectives) - set(COLLECTIVES)
    if unknown:
        p.error(f"unknown collectives {sorted(unknown)} (known: {', '.join(COLLECTIVES)})")
    return args


def _store_barrier(store: Any, key: str, world: int, master: bool) -> None:
    """Wait until every rank has arrived, through the rendezvous store (the watchdog bounds the wait). The
    rank that hosts the store leaves last: had it exited first, the others' next poll would find no store."""
    store.add(f"{key}/in", 1)
    while store.add(f"{key}/in", 0) < world:
        time.sleep(0.05)
    store.add(f"{key}/out", 1)
    while master and store.add(f"{key}/out", 0) < world:
        time.sleep(0.05)


def _groups(spec: str, names: list[str]) -> list[list[int]]:
    """Rank lists per group from ``a,b;c,d`` (node names); default: one group of every rank."""
    if not spec.strip():
        return [list(range(len(names)))]
    out = []
    for part in spec.split(";"):
        members = [n.strip() for n in part.split(",") if n.strip()]
        ranks = [r for r, name in enumerate(names) if name in members]
        missing = [m for m in members if m not in names]
        if missing:
            sys.exit(f"gpuaccept.probes.nccl: --groups names {missing}, which run no rank (on {sorted(set(names))})")
        out.append(ranks)
    return out


def _mem_available() -> int:
    with open("/proc/meminfo") as fh:
        return next((int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable")), 0)


def _split(t: Any, rows: int) -> list[Any]:
    """``rows`` consecutive views of a 1-D tensor; the last one takes the remainder (all_reduce of odd sizes)."""
    step = t.numel() // rows
    return [t[r * step : (r + 1) * step if r < rows - 1 else t.numel()] for r in range(rows)]


class _Sweep:
    """One rank's sweep on its communicator: buffers, timing loops, verification."""

    def __init__(
        self,
        args: argparse.Namespace,
        torch: Any,
        dist: Any,
        pg: Any,
        ranks: list[int],
        device: Any,
        dog: Watchdog,
        faults: dict[str, Any],
    ) -> None:
        self.args, self.torch, self.dist, self.pg, self.ranks = args, torch, dist, pg, ranks
        self.device, self.dog, self.faults = device, dog, faults
        self.n = len(ranks)
        self.grank = ranks.index(dist.get_rank())
        self.cuda = device.type == "cuda"
        self._token = torch.zeros(1, device=device)
        self.all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """A tiny all_reduce and a device sync: every rank starts its timer together (nccl-tests Barrier)."""
        self.dist.all_reduce(self._token, group=self.pg)
        self.sync()

    def free_bytes(self) -> int:
        """Free memory on the smallest rank of the group (every rank must run the same sizes)."""
        if self.cuda:
            free = self.torch.cuda.mem_get_info(self.device)[0]
        else:
            free = _mem_available() // max(1, rank_info().local_world_size)
        t = self.torch.tensor([free], dtype=self.torch.int64, device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.pg)
        return int(t.item())

    def buffers(self, coll: str, size: int) -> tuple[Any, Any]:
        """Input and output tensors (float32) for the largest size; smaller sizes use leading views."""
        numel, block = size // 4, size // 4 // self.n
        empty = self.torch.empty
        if coll in ("all_reduce", "broadcast"):
            buf = empty(numel, device=self.device)
            return buf, buf
        if coll == "all_gather":
            return empty(block, device=self.device), empty(block * self.n, device=self.device)
        if coll == "reduce_scatter":
            return empty(block * self.n, device=self.device), empty(block, device=self.device)
        return empty(block * self.n, device=self.device), empty(block * self.n, device=self.device)

    def views(self, coll: str, size: int, inp: Any, out: Any) -> tuple[Any, Any, Callable[[], None]]:
        block = size // 4 // self.n
        whole = size // 4 if coll in ("all_reduce", "broadcast") else block * self.n
        i_len = block if coll == "all_gather" else whole
        o_len = block if coll == "reduce_scatter" else whole
        i, o = inp[:i_len], out[:o_len]
        dist, pg = self.dist, self.pg
        ops: dict[str, Callable[[], Any]] = {
            "all_reduce": lambda: dist.all_reduce(i, group=pg),
            "broadcast": lambda: dist.broadcast(i, src=self.ranks[patterns.ROOT], group=pg),
            "all_gather": lambda: self.all_gather(o, i, group=pg),
            "reduce_scatter": lambda: self.reduce_scatter(o, i, group=pg),
            "alltoall": lambda: dist.all_to_all_single(o, i, group=pg),
        }
        return i, o, ops[coll]

    def fill(self, coll: str, i: Any, o: Any) -> None:
        rows = patterns.inputs(coll, self.grank, self.n)
        for row, value in zip(_split(i, len(rows)), rows, strict=True):
            row.fill_(value)
        if o.data_ptr() != i.data_ptr():
            o.fill_(patterns.UNSET)

    def verify(self, coll: str, o: Any) -> tuple[int, FirstWrong | None]:
        """Wrong elements in the output and the first one (row, index, got, want)."""
        first: FirstWrong | None
        want = patterns.expected(coll, self.grank, self.n)
        wrong, first = 0, None
        for r, (row, value) in enumerate(zip(_split(o, len(want)), want, strict=True)):
            for start in range(0, row.numel(), _CHUNK):
                part = row[start : start + _CHUNK]
                bad = int(self.torch.count_nonzero(part != value).item())
                if bad and first is None:
                    idx = int(self.torch.nonzero(part != value)[0].item())
                    first = FirstWrong(row=r, index=start + idx, got=float(part[idx].item()), want=value)
                wrong += bad
        return wrong, first

    def loop(self, op: Callable[[], Any], count: int) -> float:
        """Seconds per launch of ``count`` back-to-back launches between two device syncs."""
        slow = self.faults.get("slow_s", 0.0)
        self.sync()
        start = time.perf_counter()
        for _ in range(count):
            if slow:
                time.sleep(slow)
            self.dog.launched()  # counted before the call: gloo blocks inside it
            op()
        self.sync()
        return (time.perf_counter() - start) / count

    def run(self, coll: str, sizes: list[int]) -> list[NcclRow]:
        args, out = self.args, list[NcclRow]()
        inp, outp = self.buffers(coll, sizes[-1])
        for size in sizes:
            self.dog.arm(f"{coll} {format_bytes(size)}", args.op_timeout)
            i, o, op = self.views(coll, size, inp, outp)
            self.dog.phase("warmup")
            if self.faults.get("hang"):
                time.sleep(1e6)
            if args.warmup:
                self.loop(op, args.warmup)
            trials = []
            for t in range(args.trials):
                self.dog.phase(f"trial {t + 1}/{args.trials}")
                self.barrier()
                trials.append(self.loop(op, args.iters) * 1e6)
            self.dog.phase("verify")
            self.fill(coll, i, o)
            self.barrier()
            op()
            self.sync()
            if self.faults.get("corrupt"):
                o.view(-1)[0] += 1
            wrong, first = self.verify(coll, o)
            self.dog.disarm()
            median = statistics.median(trials)
            row = {"collective": coll, "bytes": size, "time_us": median, "trials_us": trials, "wrong": wrong}
            out.append(cast(NcclRow, {**row, "first_wrong": first}))
            if self.grank == 0:  # progress for an operator running the probe by hand (this rank's time;
                # the judged busbw is the sweep's, from the slowest rank: contracts.nccl_sweep.GroupTable)
                print(
                    f"# {coll:>14} {size:>12} {median:>12.1f} us  busbw "
                    f"{busbw_gbs(coll, size, median / 1e6, self.n):8.2f} GB/s"
                    f"  wrong {wrong}",
                    file=sys.stderr,
                    flush=True,
                )
        del inp, outp
        if self.cuda:
            self.torch.cuda.empty_cache()
        return out


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    info, node = rank_info(), node_name()
    faults = selftest_faults(node, info.rank, info.local_rank)
    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"
    logs = None
    if backend == "nccl":
        device = torch.device("cuda", info.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        logs = debug_env(ring=args.ring, debug=not args.no_nccl_debug, folder=args.nccl_log_dir, rank=info.rank)
    else:
        device = torch.device("cpu")
    timeout = datetime.timedelta(seconds=args.op_timeout)
    store = dist.TCPStore(
        info.master_addr, info.master_port, info.world_size, is_master=info.rank == 0, timeout=timeout
    )
    extra: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(
        backend,
        store=store,
        rank=info.rank,
        world_size=info.world_size,
        timeout=timeout + datetime.timedelta(seconds=60),
        **extra,
    )
    dog = Watchdog(info.rank, node)
    try:
        _run(args, info, node, faults, torch, dist, backend, device, logs, dog)
    except BaseException as exc:
        dog.absorb(exc)


def _run(
    args: argparse.Namespace,
    info: Any,
    node: str,
    faults: dict[str, Any],
    torch: Any,
    dist: Any,
    backend: str,
    device: Any,
    logs: str | None,
    dog: Watchdog,
) -> None:
    """Everything after the rendezvous, under the watchdog: names, groups, sweep, report, teardown."""

    def client() -> Any:
        return dist.TCPStore(info.master_addr, info.master_port, is_master=False, timeout=datetime.timedelta(seconds=5))

    dog.set_group(range(info.world_size), [node] * info.world_size, client)
    dog.arm("node name exchange", args.op_timeout)
    where: list[Any] = [None] * info.world_size
    dist.all_gather_object(where, (node, info.local_rank))
    names = [w[0] for w in where]
    groups = _groups(args.groups, names)
    rails: list[int | None] = [None] * len(groups)
    if args.rails:
        split = split_rails(groups, [w[1] for w in where], args.rail_set)
        groups, rails = [ranks for _, ranks in split], [rail for rail, _ in split]
    my_gid, pg = None, None
    for gid, ranks in enumerate(groups):
        whole = len(groups) == 1 and sorted(ranks) == list(range(info.world_size))
        group_pg = dist.group.WORLD if whole else dist.new_group(ranks)
        if info.rank in ranks:
            my_gid, pg = gid, group_pg
    dog.disarm()
    data: dict[str, Any] = {
        "backend": backend,
        "torch": torch.__version__,
        "world_size": info.world_size,
        "groups": len(groups),
        "local_rank": info.local_rank,
        "ring": args.ring,
        "iters": args.iters,
        "warmup": args.warmup,
        "trials": args.trials,
        "faults": faults or None,
        "nccl_version": ".".join(str(v) for v in torch.cuda.nccl.version()) if backend == "nccl" else None,
        "env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_") and "DEBUG" not in k}
        if backend == "nccl"
        else {},
        "communicator": {"outcome": "no_group"},
    }
    if my_gid is not None:
        ranks = groups[my_gid]
        dog.set_group(ranks, names, client)
        sweep = _Sweep(args, torch, dist, pg, ranks, device, dog, faults)
        dog.arm("memory check", args.op_timeout)
        free = sweep.free_bytes()
        dog.disarm()
        requested = sweep_sizes(args.min_bytes, args.max_bytes, args.factor)
        results, capped = list[NcclRow](), dict[str, CappedSizes]()
        for coll in args.collectives:
            sizes = requested_sizes(coll, requested, len(ranks))
            fit = cap_sizes(sizes, coll, len(ranks), free, args.mem_fraction)
            if len(fit) < len(sizes):
                capped[coll] = CappedSizes(largest=fit[-1] if fit else 0, free_bytes=free)
            if fit:
                results += sweep.run(coll, fit)
        data["communicator"] = NcclInGroup(
            outcome="in_group",
            group=my_gid,
            rail=rails[my_gid],
            group_nodes=list(dict.fromkeys(names[r] for r in ranks)),
            group_ranks=ranks,
            results=results,
            capped=capped,
            free_bytes=free,
        )
    dog.set_group(range(info.world_size), names, client)
    # Groups side by side finish apart: one on a slow node takes up to op_timeout per collective and size.
    # The others wait for it in the store (a collective would time out after one op_timeout and end every
    # rank as hung, hiding the slow group): up to one op_timeout per step.
    steps = len(args.collectives) * len(sweep_sizes(args.min_bytes, args.max_bytes, args.factor)) + 2
    dog.arm("final barrier", args.op_timeout * steps)
    _store_barrier(client(), "gpuaccept_final_barrier", info.world_size, master=info.rank == 0)
    dog.disarm()
    nranks = len(groups[my_gid]) if my_gid is not None else info.world_size
    data["nccl"] = collect_facts(logs, info.rank, nranks, keep=bool(args.nccl_log_dir))
    emit(data, gpu=gpu_identity(device.index) if backend == "nccl" else None, probe="nccl")
    dog.arm("teardown", args.op_timeout)
    dist.destroy_process_group()
    dog.close()


if __name__ == "__main__":
    main()
