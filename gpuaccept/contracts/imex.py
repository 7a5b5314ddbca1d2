"""What the IMEX probe hands back from one node: the IMEX domain as ``nvidia-imex-ctl -N`` shows it, the node's
own names and addresses (to match members to Slurm nodes), and the step's IMEX channel.

IMEX (NVIDIA's Internode Memory Exchange service) brokers GPU memory between the nodes of an NVLink domain; a
job imports another node's memory only through an IMEX channel it can open
(``/dev/nvidia-caps-imex-channels/channelN``), which Slurm's ``switch/nvidia_imex`` hands to each step.
Whether the tool answered is a tagged union on ``outcome``: an answer carries the parsed domain, a silence says
why. Readings the node may not give (a channel's device numbers) are ``X | None`` with an ``errors`` entry.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from gpuaccept.contracts.strict import FORBID

__all__ = ["ImexAnswer", "ImexChannel", "ImexMember", "ImexRecord", "ImexSilent", "ImexToolMissing"]


class _Payload(BaseModel):
    model_config = FORBID


class ImexMember(_Payload):
    """One ``Node #i - <ip> [- <host name>] - <state> [- Version: v]`` line."""

    index: int
    ip: str
    host_name: str | None
    state: str
    version: str | None


class ImexAnswer(_Payload):
    """``nvidia-imex-ctl -N`` answered: its members, connectivity table (row i = from member i) and state."""

    outcome: Literal["answered"]
    members: list[ImexMember]
    #: ``connectivity[i][j]``: the code from member i to member j (C, I, N, R, D, A, !V!, !M!)
    connectivity: list[list[str]]
    domain_state: str | None
    #: the argv that answered (``-N -H`` where the tool takes ``-H``, else ``-N``)
    argv: list[str]


class ImexSilent(_Payload):
    """The tool ran but gave no domain status (daemon down, config missing, output not understood)."""

    outcome: Literal["no_answer"]
    why: str
    output: str


class ImexToolMissing(_Payload):
    """No ``nvidia-imex-ctl`` on the node's PATH: the IMEX package is not installed (SDN17)."""

    outcome: Literal["tool_missing"]
    tool: str


ImexStatus = Annotated[ImexAnswer | ImexSilent | ImexToolMissing, Field(discriminator="outcome")]


class ImexChannel(_Payload):
    """The step's IMEX channels as it sees them, and whether the first opens."""

    folder: str
    #: the channel files the step sees (Slurm's plugin shows each step only its own)
    names: list[str]
    #: the first channel is a character device (None: no channel)
    is_char_device: bool | None
    major: int | None
    minor: int | None
    #: open(O_RDONLY) succeeded
    opened: bool
    #: the errno name open() failed with (ENXIO: no driver answers the major), None when it opened or no channel
    open_error: str | None


class ImexRecord(_Payload):
    """One node's IMEX reading."""

    node: str
    hostname: str
    #: the node's IPv4 addresses (``ip -o -4 addr``, else its hostname's resolution)
    addresses: list[str]
    settle_s: float
    #: the major /proc/devices lists for ``nvidia-caps-imex-channels`` (None: no IMEX driver on the node)
    driver_major: int | None
    status: ImexStatus
    channel: ImexChannel
    errors: list[str]
