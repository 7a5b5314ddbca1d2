"""The mounts judge (``verdicts/storage_meta.judge_mounts``) on a reading it cannot interpret (issue 57 item 4): a
node whose ``/proc/modules`` could not be read is "could not measure" for each module the site declares, naming
the node, the path and what was unreadable, never a module "not loaded" (FAILED) nor one loaded (passed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuaccept.probes import mounts
from gpuaccept.thresholds.storage_site import Filesystem, MountExpect, StorageSection
from gpuaccept.verdicts.storage_meta import judge_mounts


class _Judge:
    def __init__(self) -> None:
        self.expected: list[tuple[str, Any, Any, dict[str, Any]]] = []
        self.unmeasured: list[tuple[str, str, str, dict[str, Any]]] = []

    def expect(self, name: str, observed: Any, expected: Any, *, node: str, **subject: Any) -> None:
        self.expected.append((name, observed, expected, {"node": node, **subject}))

    def check(self, metric: str, value: Any, *, node: str, **subject: Any) -> None:
        pass

    def unreadable(self, metric: str, why: str, *, node: str, **subject: Any) -> None:
        self.unmeasured.append((metric, node, why, subject))


def _judged(tmp_path: Path, modules: list[str] | None) -> _Judge:
    fs = Filesystem(
        path=str(tmp_path), scope="local", role="scratch", contract="x", mount=MountExpect(modules=("lustre",))
    )
    payload = mounts.measure([str(tmp_path)], write=False, limit_s=10).model_copy(update={"modules": modules})
    judge = _Judge()
    judge_mounts({"node1": payload}, StorageSection(filesystems={"scratch": fs}), judge)  # type: ignore[arg-type]
    return judge


def _module_checks(judge: _Judge) -> list[tuple[Any, Any]]:
    return [
        (observed, want) for name, observed, want, subject in judge.expected if subject.get("key") == "module lustre"
    ]


def test_an_unreadable_module_list_is_could_not_measure_naming_node_and_path(tmp_path: Path) -> None:
    judge = _judged(tmp_path, None)
    assert _module_checks(judge) == []  # neither "not loaded" (FAILED) nor a pass
    [(metric, node, why, subject)] = judge.unmeasured
    assert (metric, node, subject["key"], subject["fspath"]) == (
        "storage_mount",
        "node1",
        "module lustre",
        str(tmp_path),
    )
    assert why.startswith("node1: /proc/modules could not be read") and "lustre" in why and str(tmp_path) in why


def test_a_read_module_list_is_judged(tmp_path: Path) -> None:
    assert _module_checks(_judged(tmp_path, ["nfs"])) == [("not loaded", "loaded")]
    assert _module_checks(_judged(tmp_path, ["lustre", "nfs"])) == [("loaded", "loaded")]
    assert _judged(tmp_path, []).unmeasured == []  # an empty list was read: nothing loaded is a reading
