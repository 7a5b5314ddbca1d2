"""``gpuaccept-calibrate``: limits for a GPU the catalogue does not list, or for a site's own fabric,
measured on nodes the operator declares known-good.

    gpuaccept-calibrate --sku L4-site --runs 3 --out site-l4.yaml -- --launcher slurm --nodes 4
    gpuaccept-calibrate --sku L4-site --from-records reports/runs/a.json reports/runs/b.json

It runs the acceptance suite ``--runs`` times with ``--calibrate`` and ``--sku <name>`` (a figure the
new SKU has no limit for is measured and recorded, neither an error nor a pass), then writes a site
thresholds file: the operator's own site file (``--thresholds``) plus the new SKU, with an exact
``match`` on the NVML name and one limit per measured figure by the rule in
``gpuaccept.calibrate.rule`` (docs/calibrate.md). It refuses, naming node, GPU and run, when a test did
not pass on the declared-good nodes or when their figures disagree beyond the straggler rule. Rerun
with ``pytest -m acceptance --thresholds <out>`` (plus ``--sku <name>`` where a listed SKU also
matches the GPU).

Exit status: 0 written, 1 refused (the message says why), 2 usage error.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuaccept.calibrate.records import Runs, read_runs
from gpuaccept.calibrate.rule import Calibrated, Refusal, calibrate_metric
from gpuaccept.calibrate.write import site_file, write_site_file
from gpuaccept.results.record import RecordError
from gpuaccept.thresholds.loader import ThresholdsError, load_thresholds

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuaccept-calibrate",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="Arguments after -- go to pytest (e.g. -- --launcher slurm --nodes 4 --nodelist a1,a2,a3,a4).",
    )
    p.add_argument("--sku", required=True, help="name of the SKU to write (e.g. L4-site)")
    p.add_argument("--gpu-name", help="exact NVML name to match (default: the one the run records show)")
    p.add_argument("--inherits", default="gpu-node", help="SKU whose limits the new one keeps ('none' for none)")
    p.add_argument("--thresholds", type=Path, help="the site's own thresholds file, kept in the written file")
    p.add_argument("--runs", type=int, default=3, help="acceptance runs to calibrate from (default 3)")
    p.add_argument("--records-dir", type=Path, default=Path("reports/calibrate"), help="where the runs' records go")
    p.add_argument("--from-records", type=Path, nargs="+", help="calibrate from these run records; run nothing")
    p.add_argument("--out", type=Path, help="file to write (default site-<sku>.yaml)")
    p.add_argument("--k", type=float, default=3.0, help="standard deviations of margin below the lowest value")
    p.add_argument("--straggler-pct", type=float, help="disagreement that refuses (default: the straggler_pct setting)")
    p.add_argument(
        "--metric", action="append", default=[], help="also calibrate metrics matching this glob (a site fabric)"
    )
    return p


def _run_suite(args: argparse.Namespace, bootstrap: Path, pytest_args: Sequence[str]) -> list[Path]:
    """The acceptance suite ``args.runs`` times in calibration mode; the records it wrote."""
    paths = []
    for run in range(1, args.runs + 1):
        record = args.records_dir / f"run-{run}.json"
        log = args.records_dir / f"run-{run}.log"
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "acceptance",
            "-p",
            "no:cacheprovider",
            "--calibrate",
            "--sku",
            args.sku,
            "--thresholds",
            str(bootstrap),
            "--run-record",
            str(record),
            *(f"--calibrate-metric={g}" for g in args.metric),
            *pytest_args,
        ]
        print(f"run {run}/{args.runs}: {' '.join(cmd[1:])}", flush=True)
        with log.open("w") as handle:
            done = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, check=False)
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        print(f"  exit {done.returncode}: {tail[0]} (log {log})", flush=True)
        if not record.exists():
            raise Refusal(f"run {run} wrote no run record ({record}); see {log}")
        paths.append(record)
    return paths


def calibrate(
    runs: Runs, *, thresholds_file: Path | None, pct: float | None, k: float
) -> tuple[dict[str, Calibrated], float]:
    """A limit for every figure in ``runs``, or one ``Refusal`` naming every disagreement."""
    thresholds = load_thresholds(thresholds_file)
    pct = pct if pct is not None else thresholds.setting("straggler_pct")
    limits: dict[str, Calibrated] = {}
    refusals: list[str] = []
    for key, samples in sorted(runs.samples.items()):
        spec = thresholds.metrics[key.partition("@")[0]]
        try:
            limits[key] = calibrate_metric(key, samples, better=spec.better, pct=pct, k=k)
        except Refusal as exc:
            refusals.append(str(exc))
    if refusals:
        raise Refusal("\n".join(refusals))
    if not limits:
        raise Refusal(
            f"the run records ({', '.join(map(str, runs.paths))}) hold no figure measured without a limit: "
            "were they run with --calibrate and --sku <the new SKU>?"
        )
    return limits, pct


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = _parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    inherits = None if args.inherits in ("", "none") else args.inherits
    out = args.out or Path(f"site-{args.sku}.yaml")
    try:
        base: dict[str, Any] | None = yaml.safe_load(args.thresholds.read_text()) if args.thresholds else None
        if args.from_records:
            paths = list(args.from_records)
        else:
            if not args.gpu_name and inherits is None:
                raise ThresholdsError("--inherits none needs --gpu-name: a new SKU needs a match or a parent")
            args.records_dir.mkdir(parents=True, exist_ok=True)
            empty = site_file(
                Runs([]), {}, sku=args.sku, gpu_name=args.gpu_name, inherits=inherits, base=base, pct=0, k=args.k
            )
            bootstrap = write_site_file(
                empty,
                args.records_dir / "bootstrap.yaml",
                "gpuaccept-calibrate: the new SKU without limits, for the calibration runs",
            )
            paths = _run_suite(args, bootstrap, pytest_args)
        runs = read_runs(paths, recalibrate=args.metric)
        names = runs.gpu_names
        if args.gpu_name and names and names != [args.gpu_name]:
            raise Refusal(f"--gpu-name {args.gpu_name!r} but the nodes report {', '.join(names)}")
        gpu_name = args.gpu_name or (names[0] if names else None)
        if gpu_name is None:
            raise ThresholdsError("the records show no GPU (CPU nodes): name the model to match with --gpu-name")
        limits, pct = calibrate(runs, thresholds_file=args.thresholds, pct=args.straggler_pct, k=args.k)
        listed = load_thresholds(args.thresholds).sku_for_gpu(gpu_name)
        if listed is not None and listed != args.sku:  # calibrating a listed GPU "as if unlisted"
            print(f"note: {gpu_name!r} is listed as SKU {listed}: the file selects {args.sku} only with --sku")
        match = gpu_name if listed in (None, args.sku) else None  # two SKUs claiming one name is a usage error
        doc = site_file(runs, limits, sku=args.sku, gpu_name=match, inherits=inherits, base=base, pct=pct, k=args.k)
        header = (
            f"Site thresholds written by gpuaccept-calibrate for SKU {args.sku} ({gpu_name}) from\n"
            f"{', '.join(map(str, runs.paths))} on {', '.join(runs.nodes)}; rule: docs/calibrate.md.\n"
            f"Rerun: pytest -m acceptance --thresholds {out}"
            + (f" --sku {args.sku}" if args.from_records is None else "")
        )
        write_site_file(doc, out, header)
    except Refusal as exc:
        print(f"gpuaccept-calibrate: refused: {exc}", file=sys.stderr)
        return 1
    except (ThresholdsError, RecordError, OSError, yaml.YAMLError) as exc:
        print(f"gpuaccept-calibrate: {exc}", file=sys.stderr)
        return 2
    print(f"{'limit':<48} {'value':>14}  from")
    for key, cal in sorted(limits.items()):
        bound = f"== {cal.equal}" if cal.equal is not None else f">= {cal.min:g}" if cal.min is not None else ""
        bound = bound or f"<= {cal.max:g}"
        print(f"{key:<48} {bound:>14}  {cal.figures()}")
    print(f"wrote {out} (SKU {args.sku}, " + (f"match {match!r})" if match else "selected with --sku)"))
    print(f"rerun: pytest -m acceptance --thresholds {out} --sku {args.sku}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
