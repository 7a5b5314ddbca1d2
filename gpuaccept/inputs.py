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

import ast
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaccept.settings import Settings

__all__ = [
    "TOKENIZER_FILES",
    "WEIGHT_FILES",
    "InputError",
    "check_dataset",
    "check_inputs",
    "check_model_path",
    "check_writable",
    "read_chat_jsonl",
]


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


#: the files a checkpoint's weights may come in, as ``transformers`` looks for them (an index lists shards)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: one of these is the tokenizer the fine-tune and the inference read from the checkpoint folder
TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))
#: a safetensors header larger than this is not a header (the format caps it at 100 MB)
_HEADER_LIMIT = 100_000_000


def check_model_path(model: Path, source: str, gpu_memory_gib: float | None = None) -> None:
    """A local Hugging Face checkpoint the nodes can load, checked on the login node in well under a second
    without torch: a folder with ``config.json`` naming an architecture the installed ``transformers`` knows
    (anything else would be looked up on the hub, over the network), weight files present with readable
    headers and every shard an index names (a truncated shard is found here, not 40 s into a node's load),
    a tokenizer, and weights that fit ``gpu_memory_gib`` (the SKU's GPU memory, when known): every GPU
    fine-tunes the checkpoint alone first."""
    if not model.exists():
        raise InputError(f"{source}: {model} does not exist (a local Hugging Face checkpoint folder)")
    if not model.is_dir():
        raise InputError(f"{source}: {model} is not a folder (a local Hugging Face checkpoint folder)")
    config = model / "config.json"
    try:
        parsed = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{source}: {model} has no config.json: not a Hugging Face checkpoint folder") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{source}: {config} is not readable JSON: {exc}") from None
    _check_architecture(parsed, config, source)
    weight_bytes = _weight_bytes(model, source)
    if not any(all((model / name).is_file() for name in names) for names in TOKENIZER_FILES):
        wanted = " or ".join(" + ".join(names) for names in TOKENIZER_FILES)
        raise InputError(f"{source}: {model} has no tokenizer ({wanted}): the fine-tune reads it from the folder")
    if gpu_memory_gib is not None and weight_bytes > gpu_memory_gib * 2**30:
        raise InputError(
            f"{source}: {model}'s weights are {weight_bytes / 2**30:.1f} GiB, more than a GPU's "
            f"{gpu_memory_gib:.1f} GiB: every GPU fine-tunes the checkpoint alone first"
        )


def _check_architecture(config: Any, path: Path, source: str) -> None:
    """``model_type`` names an architecture the installed ``transformers`` knows (``_known_model_types``); where
    ``transformers`` is not installed (a login node without the training extras) the nodes' own is what counts,
    and the check is left to them."""
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if not isinstance(model_type, str) or not model_type:
        raise InputError(f"{source}: {path} has no 'model_type': transformers cannot tell the architecture")
    known = _known_model_types()
    if known is None:
        return
    if model_type not in known:
        raise InputError(
            f"{source}: {path}: model_type {model_type!r} is not an architecture the installed transformers "
            "knows (a newer transformers, or a model with remote code, which the suite does not run)"
        )


def _known_model_types() -> frozenset[str] | None:
    """The ``model_type`` names of the installed ``transformers``' ``CONFIG_MAPPING_NAMES``, read from its source
    without importing it: importing ``transformers.models.auto.configuration_auto`` imports torch (5.7 s on the
    2-core CI machine, 2026-11-28), and bad input must be refused in about a second. The table is a literal in
    ``models/auto/auto_mappings.py`` (newer releases) or ``configuration_auto.py`` (older), which may add to it
    with ``CONFIG_MAPPING_NAMES.update({...})``. None when transformers is not installed; its own table
    (imported) when the source holds none to read."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    auto = Path(next(iter(spec.submodule_search_locations))) / "models" / "auto"
    names: set[str] = set()
    for source in (auto / "auto_mappings.py", auto / "configuration_auto.py"):
        try:
            tree = ast.parse(source.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if _names_the_table(node):
                names.update(_literal_keys(node))
    if names:
        return frozenset(names)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return frozenset(CONFIG_MAPPING_NAMES)


def _names_the_table(node: ast.AST) -> bool:
    """An assignment to ``CONFIG_MAPPING_NAMES``, or a call of its ``update``."""
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == "CONFIG_MAPPING_NAMES" for t in node.targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
        return isinstance(node.func.value, ast.Name) and node.func.value.id == "CONFIG_MAPPING_NAMES"
    return False


def _literal_keys(node: ast.AST) -> set[str]:
    """The string keys of the (key, value) pairs and dict literals under ``node``."""
    keys: set[str] = set()
    for part in ast.walk(node):
        if isinstance(part, ast.Tuple) and len(part.elts) == 2:
            first = part.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                keys.add(first.value)
        elif isinstance(part, ast.Dict):
            keys.update(k.value for k in part.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return keys


def _weight_bytes(model: Path, source: str) -> int:
    """The checkpoint's weight bytes, from its files' headers: every shard an index names must exist, and a
    safetensors file must hold the whole of what its header describes."""
    found = [name for name in WEIGHT_FILES if (model / name).is_file()]
    if not found:
        raise InputError(f"{source}: {model} has no weights ({', '.join(WEIGHT_FILES)}): config.json alone")
    name = found[0]
    if not name.endswith(".index.json"):
        return _shard_bytes(model / name, source)
    try:
        index = json.loads((model / name).read_text(encoding="utf-8"))
        shards = sorted(set(index["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{source}: {model / name} is not a weight index (a 'weight_map'): {exc}") from None
    missing = [shard for shard in shards if not (model / shard).is_file()]
    if missing:
        raise InputError(f"{source}: {model / name} names {len(missing)} missing shard(s): {', '.join(missing[:3])}")
    return sum(_shard_bytes(model / shard, source) for shard in shards)


def _shard_bytes(path: Path, source: str) -> int:
    """A safetensors file's tensor bytes, checked against its size (8-byte length, JSON header, data); a
    pickled ``.bin`` counts by its size (reading it would need torch)."""
    size = path.stat().st_size
    if path.suffix != ".safetensors":
        return size
    try:
        with path.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            if not 0 < length <= _HEADER_LIMIT or 8 + length > size:
                raise ValueError(f"header length {length} in a file of {size} bytes")
            header = json.loads(handle.read(length))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise InputError(f"{source}: {path} is not a readable safetensors file: {exc}") from None
    if 8 + length + end > size:
        raise InputError(
            f"{source}: {path} is truncated: its header describes {end} bytes of tensors, it holds {size - 8 - length}"
        )
    return end


def check_writable(folder: Path, what: str) -> None:
    """That the run can write ``folder``: found now, not when the record is written at the end. A real entry
    is made and removed (``os.access`` is no proof: it is always true for root, also on ``/proc``), and a
    folder that does not exist yet is made for the proof and removed again, with every parent it needed, except
    one another run started beside this one made or writes in meanwhile (one of two runs at once exited 3 on
    ``Directory not empty: 'reports'`` when the other's Allure folder had gone in between)."""
    made: list[Path] = []
    try:
        missing, needed = folder.absolute(), []
        while not missing.exists():
            needed.append(missing)
            missing = missing.parent
        for path in reversed(needed):
            try:
                path.mkdir()
            except FileExistsError:  # another run started in the same folder made it meanwhile: its, not ours
                continue
            made.append(path)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".gpuaccept-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{what}: cannot write in {folder}: {exc.strerror or exc}") from None
    finally:
        for path in reversed(made):
            try:
                path.rmdir()
            except OSError:  # a run started beside this one writes in it now (its Allure folder): it stays
                pass


def check_inputs(
    settings: Settings, reports_dir: Path, alluredir: Path | None = None, gpu_memory_gib: float | None = None
) -> None:
    """Every file and folder the settings name, and every folder the run writes: ``reports/``, the run
    record's folder and the Allure results folder. ``gpu_memory_gib`` is the GPU memory of ``--sku``'s
    catalogue entry when one was named, else the largest any listed SKU has."""
    if settings.model_path is not None:
        check_model_path(settings.model_path, settings.sources.get("model_path", "--model-path"), gpu_memory_gib)
    if settings.dataset is not None:
        check_dataset(settings.dataset, settings.sources.get("dataset", "--dataset"))
    if settings.run_record is not None:
        if settings.run_record.is_dir():
            raise InputError(f"{settings.sources.get('run_record', '--run-record')}: {settings.run_record} is a folder")
        check_writable(settings.run_record.parent, settings.sources.get("run_record", "--run-record"))
    else:
        check_writable(reports_dir / "runs", "the run record's folder")
    check_writable(reports_dir, "the reports folder")
    if alluredir is not None:
        check_writable(alluredir, "--alluredir")
