"""The jobs a fine-tune launch runs once its training is over, each on the GPU ``_finetune_ranks.lifecycles`` gives
it: a strategy's lifecycle (``strategy.lifecycle``), the resume from rank 0's own checkpoint (``RESUME``,
``gpuaccept.training.resume``) and the merged weights saved and cold-started (``SERVED``,
``gpuaccept.training.served_weights``). Each frees its GPU first and returns what it measured, or why it could not:
the launch's training figures go out whatever one job does.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from gpuaccept.training.strategy import lifecycle, release

__all__ = ["RESUME", "SERVED", "run_after"]

#: the key of the resume job among the jobs run once training is over
RESUME = "resume"
#: the key of the job that saves the merged weights and cold-starts them
SERVED = "served"


def run_after(
    name: str, job: dict[str, Any], *, rt: Any, tokenizer: Any, test_ex: list[Any], train_ex: list[Any]
) -> dict[str, Any]:
    """The job ``name`` (a strategy's name for its lifecycle, ``RESUME`` or ``SERVED``) on this rank's GPU."""
    if name == RESUME:
        return _resumed(job, rt, train_ex)
    if name == SERVED:
        return _served(job, rt)
    return lifecycle(**job, rt=rt, tokenizer=tokenizer, test_ex=test_ex)


def _resumed(job: dict[str, Any], rt: Any, train_ex: list[Any]) -> dict[str, Any]:
    """The resume from rank 0's own checkpoint. A checkpoint on the site's filesystem (``clean``) is removed after,
    unless its bytes changed (the evidence): the run folder keeps its own."""
    import torch

    from gpuaccept.training.checkpoint import remove
    from gpuaccept.training.resume import resume

    job = dict(job)
    clean = job.pop("clean", False)
    release(torch, rt.device.type == "cuda")
    out: dict[str, Any] = {}
    started = time.monotonic()
    try:
        out = resume(**job, rt=rt, train_ex=train_ex)
        return out
    except Exception as exc:  # the launch's figures still go out; the resume's check names this
        traceback.print_exc()
        return {
            "outcome": "stopped",
            "restore": None,
            "step": job["step"],
            "expected_losses": job["expected"],
            "resume_error": f"{type(exc).__name__}: {str(exc)[:500]}",
            "seconds": round(time.monotonic() - started, 3),
        }
    finally:
        release(torch, rt.device.type == "cuda")
        if clean and not (out.get("restore") or {}).get("mismatched"):  # files that changed are the evidence: kept
            remove(Path(job["folder"]))


def _served(job: dict[str, Any], rt: Any) -> dict[str, Any]:
    """The merged weights saved to the models filesystem and cold-started (they clean up after themselves)."""
    import torch

    from gpuaccept.training.served_weights import serve_from_storage

    release(torch, rt.device.type == "cuda")
    try:
        return serve_from_storage(**job, device=rt.device)
    except Exception as exc:  # the launch's figures still go out; the served weights' check names this
        traceback.print_exc()
        return {"outcome": "error", "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    finally:
        release(torch, rt.device.type == "cuda")
