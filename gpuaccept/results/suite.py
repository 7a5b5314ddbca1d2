"""Which suite judged the run: its version, its git commit and whether its tracked files were edited.

A verdict is only as good as the code that reached it; an auditor reading a run record must be able to
find that code. Read with git from the package's own checkout (an editable install); anywhere else
(a wheel, no git) the commit and the edit state are ``unknown`` and the version stands alone.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import gpuaccept

__all__ = ["suite_identity"]

_PACKAGE = Path(gpuaccept.__file__).resolve().parent


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def suite_identity() -> dict[str, Any]:
    """``{"version", "commit", "edited"}``; ``commit``/``edited`` are ``"unknown"`` without the package's checkout."""
    identity: dict[str, Any] = {"version": gpuaccept.__version__, "commit": "unknown", "edited": "unknown"}
    top = _git(_PACKAGE, "rev-parse", "--show-toplevel")
    # the checkout must be the package's own (a wheel inside some other repository's venv is not)
    if top is None or Path(top).resolve() / "gpuaccept" != _PACKAGE:
        return identity
    commit = _git(_PACKAGE, "rev-parse", "HEAD")
    status = _git(_PACKAGE, "status", "--porcelain", "--untracked-files=no")
    if commit:
        identity["commit"] = commit
    if status is not None:
        identity["edited"] = bool(status)
    return identity
