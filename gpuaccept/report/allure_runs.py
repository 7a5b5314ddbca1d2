"""Allure results per run: ``reports/allure/<UTC start>[-n]/``, and ``reports/allure-results`` a link to
the newest finished run's folder (what ``gpuaccept-report`` reads by default).

One shared ``reports/allure-results`` emptied at each start mixed two runs started together, or
deleted the results of a run still going. Each run claims its own folder (an exclusive ``mkdir``) and
the link moves when its record becomes ``latest.json``, as that file does. The oldest folders beyond
``KEEP`` are removed then, at the end, not at the start (a 256-node run leaves about 17,000 files,
49.6 s to remove: docs/scale.md).
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from pathlib import Path

__all__ = ["KEEP", "claim_run_folder", "point_latest"]

#: run folders kept (the newest); the run records in reports/runs keep the history
KEEP = 10


def claim_run_folder(reports: Path, now: _dt.datetime | None = None) -> Path:
    """A new folder for this run's results, never one another run holds."""
    root = reports / "allure"
    root.mkdir(parents=True, exist_ok=True)
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        folder = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"{root}: 999 Allure result folders named {stamp}: clean the folder up")


def point_latest(reports: Path, folder: Path) -> Path:
    """Make ``reports/allure-results`` a link to ``folder`` (relative, replaced atomically); then remove the
    oldest run folders beyond ``KEEP``."""
    link = reports / "allure-results"
    if link.is_dir() and not link.is_symlink():  # the layout before per-run folders: one shared folder
        shutil.rmtree(link)
    tmp = reports / f".allure-results-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(os.path.relpath(folder, reports), tmp)
    os.replace(tmp, link)
    runs = sorted(p for p in folder.parent.iterdir() if p.is_dir() and not p.is_symlink())
    for old in runs[: max(0, len(runs) - KEEP)]:
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)
    return link
