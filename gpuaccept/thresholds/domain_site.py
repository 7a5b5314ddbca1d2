"""What a site declares of its NVLink domains (``domain:`` in a thresholds file).

Nothing a node reads says how many compute trays its rack was bought with, which of them are out for repair,
or whether the site runs IMEX per job or across the whole rack: the site says it. A GB200/GB300 NVL72 rack is one
NVLink domain of 18 compute trays; Slurm schedules it as one ``topology/block`` block (``dispatch/topology.py``).

    domain:
      source: "rack acceptance plan r3, section 4"
      nvlink_domain: nvl72          # the SKU's default from the catalogue, overridden (none: no domain judged)
      imex_domain: job              # job: IMEX spans the job's nodes; block: every node of the block
      imex_settle_s: 10
      blocks:
        rack01: {trays: ["gb-r01-[01-18]"], out: ["gb-r01-07"]}

``trays`` and ``out`` are Slurm hostlists (expanded by Slurm where they are judged). A block of ``scontrol show
topology`` the site does not list is judged on cliques alone; a listed block missing from Slurm is a finding.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["IMEX_SETTLE_S", "BlockExpect", "DomainSite"]

#: Seconds the IMEX probe waits after its step starts before asking ``nvidia-imex-ctl -N``. No public figure says
#: how long an IMEX domain takes to form: with Slurm's ``switch/nvidia_imex`` the daemons already run (the plugin
#: only hands out channels); a site that starts IMEX for the job's nodes in a prolog (the per-job deployment of
#: NVIDIA's IMEX guide, "Deployment Models") waits for its peers' gRPC connections, and the daemon stays "not
#: ready" until its quorum (``IMEX_WAIT_FOR_QUORUM``) is met. 10 s is this suite's choice, not a measurement: the
#: value in force is on every IMEX check, and a site whose domain forms slower sets ``imex_settle_s``.
IMEX_SETTLE_S = 10.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BlockExpect(_Strict):
    """One block's trays: those it must hold, and those the site lists as out (not a finding when absent)."""

    trays: tuple[str, ...] = Field(min_length=1, description="Slurm hostlists of the compute trays the block holds")
    out: tuple[str, ...] = Field(default=(), description="hostlists of trays out of service: absent is no finding")


class DomainSite(_Strict):
    """``domain:``: the NVLink domain the nodes must be in, the IMEX scope, the settle window, the blocks."""

    source: str = Field(min_length=3, description="why the site declares this (a plan, a purchase order)")
    #: the SKU's default (the catalogue's) overridden: ``none`` shows fabric state without judging a domain
    nvlink_domain: Literal["nvl72", "none"] | None = None
    imex_domain: Literal["job", "block"] = "job"
    imex_settle_s: float = Field(default=IMEX_SETTLE_S, ge=0, le=600)
    blocks: dict[str, BlockExpect] = Field(default_factory=dict)


#: what a run without a ``domain:`` section judges by: the SKU's domain, IMEX over the job's nodes, the default
#: settle window, no block's trays declared
DEFAULT = DomainSite(source="no domain: section in a site file: the catalogue's defaults")


def declared_or_default(domain: DomainSite | None) -> DomainSite:
    """The site's ``domain:`` declaration, or ``DEFAULT`` where no site file makes one."""
    return domain if domain is not None else DEFAULT
