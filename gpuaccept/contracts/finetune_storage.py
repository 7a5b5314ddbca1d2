"""What the fine-tune writes of its storage work once training is over: rank 0's resumable checkpoint saved and
resumed (``training.checkpoint``, ``training.resume``) and the merged weights saved and cold-started
(``training.served_weights``), each step's figures or why it stopped.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

# pydantic validates these where a result arrives (probes/specs.py): before Python 3.12 it needs this TypedDict
from typing_extensions import TypedDict

from gpuaccept.contracts.serving import ServingFailed
from gpuaccept.contracts.strict import strict

__all__ = [
    "Checkpoint",
    "CheckpointRefused",
    "CheckpointSaved",
    "ColdStart",
    "Copied",
    "MoveRefused",
    "Moved",
    "Restore",
    "ResumeStopped",
    "Resumed",
    "SavedFile",
    "ServedPhases",
    "ServedWeights",
    "ServedWeightsOutcome",
]


@strict
class SavedFile(TypedDict):
    name: str
    bytes: int
    sha256: str


@strict
class CheckpointSaved(TypedDict):
    """``training.checkpoint.save``: the resumable checkpoint written half-way."""

    outcome: Literal["saved"]
    path: str
    step: int
    bytes: int
    seconds: float
    gbps: float | None
    files: list[SavedFile]


@strict
class CheckpointRefused(TypedDict):
    """The filesystem refused the save (``training.loop.train``)."""

    outcome: Literal["error"]
    path: str
    step: int
    error: str


@strict
class Restore(TypedDict):
    """``training.checkpoint.restore``: every file read back uncached; ``mismatched`` names the changed ones."""

    path: str
    bytes: int
    seconds: float
    gbps: float | None
    cache: str
    files: int
    mismatched: dict[str, str]


@strict
class Resumed(TypedDict):
    """``training.resume.resume``: the resumed losses beside the uninterrupted run's."""

    outcome: Literal["resumed"]
    restore: Restore
    step: int
    expected_losses: list[float]
    losses: list[float]
    max_abs_delta: float | None
    seconds: float


@strict
class ResumeStopped(TypedDict):
    """The resume did not train: the bytes read back differ, the tensors do not match, or it raised (``restore``
    None then: nothing was read back)."""

    outcome: Literal["stopped"]
    restore: Restore | None
    step: int
    expected_losses: list[float]
    resume_error: str
    seconds: float


@strict
class Checkpoint(TypedDict):
    """Rank 0's own resumable checkpoint: its save and, once training is over, the resume from it (None when the
    save failed or the resume job did not come back)."""

    saved: Annotated[CheckpointSaved | CheckpointRefused, Field(discriminator="outcome")]
    resumed: Annotated[Resumed | ResumeStopped, Field(discriminator="outcome")] | None


@strict
class Moved(TypedDict):
    """The merged weights written to the models filesystem (``served_weights.save_shards``)."""

    outcome: Literal["written"]
    path: str
    bytes: int
    seconds: float
    gbps: float | None
    files: int
    tensors: int


@strict
class Copied(TypedDict):
    """The saved weights copied to node-local scratch (``served_weights.copy_synced``)."""

    path: str
    bytes: int
    seconds: float
    gbps: float | None


@strict
class MoveRefused(TypedDict):
    outcome: Literal["error"]
    path: str
    error: str


@strict
class ColdStart(TypedDict):
    """``served_weights.cold_start`` and ``same_answer``: the weights loaded cold up to the first token. ``error``
    names tensors the files lacked (None when every one was filled); ``tokens``, ``logits_equal`` and
    ``max_abs_logit_delta`` are None when no first token was reached."""

    path: str
    bytes: int
    read_s: float
    placed_s: float
    ttft_s: float
    gbps: float | None
    cache: str
    files: int
    mismatched: dict[str, str]
    device: str
    error: str | None
    first_token: str
    tokens: list[int] | None
    logits_equal: bool | None
    max_abs_logit_delta: float | None
    loaded_from: str


@strict
class ServedPhases(TypedDict):
    """Where the served-weights job's wall time went, in seconds; a step not reached is None."""

    merged: float | None
    to_host: float | None
    save: float | None
    cold_start: float | None
    scratch: float | None
    clean: float | None


@strict
class ServedWeights(TypedDict):
    """The launch's first adapter merged, saved to the models filesystem and cold-started (rank 0's solo run).
    A step not reached is None: no save without a final adapter (``error`` says so), no cold start after a
    refused save, no scratch copy without a scratch folder or after changed bytes."""

    outcome: Literal["served"]
    adapter: str
    prompt_tokens: int
    error: str | None
    phases_s: ServedPhases | None
    saved: Annotated[Moved | MoveRefused, Field(discriminator="outcome")] | None
    cold: ColdStart | None
    scratch_copy: Copied | None
    scratch_cold: ColdStart | None


ServedWeightsOutcome = Annotated[ServedWeights | ServingFailed, Field(discriminator="outcome")]
