"""Every test hook of the suite and its gate, in one table: what can make a run judge something other
than the hardware as the hardware left it.

A test hook is an environment variable the suite's own selftests and fault proofs set to feed a probe
recorded readings, break a probe on purpose or perturb one GPU's training. None of them is ever
needed on a cluster being accepted, so wherever one is set the run cannot be ACCEPTED: the plugin
reads the login node's environment, every probe reports the hooks it saw in its result line
(``probes._protocol.emit``), and the run record, the terminal, the summary and JUnit name them
(``judging.verdict``). The per-test verdicts are judged as always; the selftests compare those.

``GPUACCEPT_SELFTEST=1`` is the gate: the knobs marked ``gated`` below are refused (or ignored, where
the reader says so) without it, so a stray variable cannot slow or break a production run. The gate
counts as a hook itself: a run that has it set is a selftest, not an acceptance.

Only the standard library: the probes import this module on the nodes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["GATE", "HOOKS", "Hook", "HookRefused", "active", "gated", "hook", "selftest_on"]

#: the gate: the selftest-only knobs are honoured only with this set to 1
GATE = "GPUACCEPT_SELFTEST"


@dataclass(frozen=True)
class Hook:
    """One test hook: its variable, who reads it, what it changes, and whether the gate must be on."""

    name: str
    reader: str
    what: str
    gated: bool = False


HOOKS: tuple[Hook, ...] = (
    Hook(GATE, "every gated knob below", "the selftest gate: the suite is testing itself"),
    Hook(
        "GPUACCEPT_TEST_INJECT",
        "gpuaccept.probes._inject",
        "the probes return a file's recorded or edited readings instead of the hardware's",
    ),
    Hook(
        "GPUACCEPT_TEST_PERTURB_TRAINING",
        "gpuaccept.training.perturb",
        "one bf16 ulp added to one GPU's weight during the fine-tune",
    ),
    Hook(
        "GPUACCEPT_FAULT_RANK_EXIT",
        "gpuaccept.training.loop",
        "a fine-tune rank exits at a given step",
        gated=True,
    ),
    Hook(
        "GPUACCEPT_FAULT_SLOW_RANK",
        "gpuaccept.training.progress_reporter",
        "a fine-tune rank sleeps after each step (a slow GPU)",
        gated=True,
    ),
    Hook(
        "GPUACCEPT_FAULT_STALL_RANK",
        "gpuaccept.training.progress_reporter",
        "a fine-tune rank stops making progress at a given step (a hang)",
        gated=True,
    ),
    Hook(
        "GPUACCEPT_FAULT_MEMCPY_SLOWDOWN",
        "gpuaccept.probes._cpubench",
        "the host copy probe does n times the work it counts",
        gated=True,
    ),
    Hook("GPUACCEPT_FAULT_NODE", "gpuaccept.probes._cpubench", "the node the copy slow-down hits", gated=True),
    Hook("GPUACCEPT_FAULT_SLOW_NODE", "gpuaccept.probes._nccl_faults", "a node's NCCL ranks sleep", gated=True),
    Hook("GPUACCEPT_FAULT_SLOW_S", "gpuaccept.probes._nccl_faults", "how long they sleep", gated=True),
    Hook("GPUACCEPT_FAULT_HANG_RANK", "gpuaccept.probes._nccl_faults", "an NCCL rank never launches", gated=True),
    Hook(
        "GPUACCEPT_FAULT_CORRUPT_RANK",
        "gpuaccept.probes._nccl_faults",
        "an NCCL rank's result is corrupted",
        gated=True,
    ),
)
_BY_NAME = {h.name: h for h in HOOKS}


class HookRefused(RuntimeError):
    """A gated knob set without the gate; the message names the knob and the gate."""


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def hook(name: str) -> Hook:
    """The registered hook ``name`` (a KeyError names an unregistered one: every reader is listed)."""
    return _BY_NAME[name]


def active(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every registered hook set (to anything but the empty string) in ``env``: name -> value.

    ``GPUACCEPT_TEST_INJECT`` set to an empty file still counts: it is set, whatever it holds.
    """
    values = _env(env)
    return {h.name: values[h.name] for h in HOOKS if values.get(h.name, "") != ""}


def selftest_on(env: Mapping[str, str] | None = None) -> bool:
    """Whether the gate is on (``GPUACCEPT_SELFTEST=1``)."""
    return _env(env).get(GATE) == "1"


def value(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """A hook's value (None when unset or empty); only registered hooks are read through here."""
    return _env(env).get(hook(name).name) or None


def gated(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """A gated knob's value, or None when unset; ``HookRefused`` when it is set without the gate."""
    found = value(name, env)
    if found is not None and hook(name).gated and not selftest_on(env):
        raise HookRefused(f"{name} is a selftest knob (set {GATE}=1 to use it)")
    return found
