"""The files and folders a run is given, checked before anything runs: one line naming the option (and
where it came from) or the file, and what is wrong.

A dataset that is empty, or a JSONL line that is not a conversation, would otherwise surface minutes
later on a node as "max() arg is an empty sequence"; a model folder that does not exist would be
handed to the Hugging Face hub, which retries over the network for a minute; a ``reports/`` the run
cannot write would lose the run record at the very end. The plugin calls ``check_inputs`` at start and
raises an ``InputError`` as a usage error (exit 4). Nothing here reads a node or the network, or imports
torch or pytest.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaccept.settings import Settings

__all__ = ["InputError", "check_dataset", "check_inputs", "check_model_path", "check_writable", "read_chat_jsonl"]


class InputError(ValueError):
    """A file or folder a run was given is unusable; the message names it and what is wrong."""


def read_chat_jsonl(path: Path) -> list[dict[str, Any]]:
    """The conversations of a chat JSONL file: each non-blank line an object whose ``messages`` list ends
    with an assistant turn. A bad line is named by its line number in the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (not UTF-8): a dataset is JSONL") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{number}: not JSON: {getattr(exc, 'msg', exc)}") from None
        messages = row.get("messages") if isinstance(row, dict) else None
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            raise InputError(f"{path}:{number}: each line needs 'messages', a list of turns")
        if messages[-1].get("role") != "assistant":
            raise InputError(f"{path}:{number}: 'messages' must end with an assistant turn (the answer trained on)")
        rows.append(row)
    return rows


def check_dataset(dataset: Path, source: str) -> None:
    """The layout ``training.data.load_splits`` reads: a folder with ``train.jsonl`` and ``test.jsonl``, or
    a train file with a ``test`` sibling, or one file split 90/10 (which needs two conversations)."""
    if not dataset.exists():
        raise InputError(f"{source}: {dataset} does not exist")
    if dataset.is_dir():
        for name in ("train.jsonl", "test.jsonl"):
            if not (dataset / name).is_file():
                raise InputError(f"{source}: the folder {dataset} has no {name} (a dataset folder holds both)")
            if not read_chat_jsonl(dataset / name):
                raise InputError(f"{source}: {dataset / name} is empty: no conversation to train or test on")
        return
    rows = read_chat_jsonl(dataset)
    sibling = dataset.with_name(dataset.name.replace("train", "test"))
    if sibling != dataset and sibling.exists():
        if not rows or not read_chat_jsonl(sibling):
            raise InputError(f"{source}: {dataset if not rows else sibling} is empty: no conversation in it")
    elif len(rows) < 2:
        raise InputError(
            f"{source}: {dataset} holds {len(rows)} conversation(s): one file is split into train and test, "
            "which needs at least 2"
        )


def check_model_path(model: Path, source: str) -> None:
    """A local Hugging Face checkpoint: a folder with ``config.json`` (anything else would be looked up on
    the hub, over the network)."""
    if not model.exists():
        raise InputError(f"{source}: {model} does not exist (a local Hugging Face checkpoint folder)")
    if not model.is_dir():
        raise InputError(f"{source}: {model} is not a folder (a local Hugging Face checkpoint folder)")
    config = model / "config.json"
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{source}: {model} has no config.json: not a Hugging Face checkpoint folder") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{source}: {config} is not readable JSON: {exc}") from None


def check_writable(folder: Path, what: str) -> None:
    """That the run can write ``folder``, or make it: found now, not when the record is written. Makes
    nothing: a folder that does not exist yet is judged by its nearest existing parent."""
    existing = folder.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{what}: cannot write in {folder}: {existing} is not a folder")
    if existing != folder.absolute():
        if not os.access(existing, os.W_OK | os.X_OK):
            raise InputError(f"{what}: cannot write in {folder}: {existing} is not writable")
        return
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".gpuaccept-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{what}: cannot write in {folder}: {exc.strerror or exc}") from None


def check_inputs(settings: Settings, reports_dir: Path) -> None:
    """Every file and folder the settings name, and where the run record goes."""
    if settings.model_path is not None:
        check_model_path(settings.model_path, settings.sources.get("model_path", "--model-path"))
    if settings.dataset is not None:
        check_dataset(settings.dataset, settings.sources.get("dataset", "--dataset"))
    if settings.run_record is not None:
        if settings.run_record.is_dir():
            raise InputError(f"{settings.sources.get('run_record', '--run-record')}: {settings.run_record} is a folder")
        check_writable(settings.run_record.parent, settings.sources.get("run_record", "--run-record"))
    else:
        check_writable(reports_dir / "runs", "the run record's folder")
