"""The site's ``tenant:`` declaration: what a node handed to a tenant must have beyond the catalogue's limits.

Root of trust (SEC22) is the site's to require: bare metal boots UEFI with Secure Boot and a TPM 2.0, a
VM's firmware may have none of them. Each of ``uefi``, ``secure_boot``, ``tpm`` is ``true`` (required:
judged, a node without it FAILED), ``false`` (not required: shown, not judged) or ``absent`` (the platform
has none: the check skips naming that declaration, as InfiniBand on a SKU without it). A key left out is
undeclared: the test skips naming the key to set, never a silent pass.

Health agents (BFX04) are the site's to name (GPUd, a DCGM exporter, ...), with the process and URL each
runs under; ``agents: absent`` declares that the site runs none. ``approved`` holds, per component, the
versions the site approved (fnmatch patterns: ``580.159.*``), judged where given.

    tenant:
      source: "site security baseline v3, section 2"
      root_of_trust: {uefi: true, secure_boot: true, tpm: true}
      agents:
        - {name: dcgm-exporter, kind: dcgm-exporter, process: dcgm-exporter, url: "http://localhost:9400/metrics"}
      approved: {gpu_driver: ["580.159.*"], os: ["ubuntu 24.04"]}
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AgentDeclaration", "Component", "Requirement", "RootOfTrust", "TenantSite"]

#: a root-of-trust item: required, not required, or declared absent (the platform has none)
Requirement = bool | Literal["absent"]
#: the components an approved list can name (the software probe's fields; ``os`` is "<ID> <VERSION_ID>")
Component = Literal["gpu_driver", "cuda_driver", "vbios", "kernel", "os", "dcgm", "dcgm_exporter"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RootOfTrust(_Model):
    uefi: Requirement | None = None
    secure_boot: Requirement | None = None
    tpm: Requirement | None = None
    tpm_min_version: int = Field(default=2, ge=1, le=2, description="the least TPM major version a required TPM has")


class AgentDeclaration(_Model):
    name: str
    kind: Literal["generic", "dcgm-exporter"] = "generic"
    process: str | None = None
    url: str | None = None

    def argument(self) -> str:
        """The agent probe's ``--agent`` argument for this declaration."""
        fields = {"name": self.name, "kind": self.kind, "process": self.process, "url": self.url}
        return ",".join(f"{k}={v}" for k, v in fields.items() if v)


class TenantSite(_Model):
    source: str = Field(min_length=1, description="why the site declares this (a policy, a contract)")
    root_of_trust: RootOfTrust = RootOfTrust()
    agents: list[AgentDeclaration] | Literal["absent"] | None = None
    approved: dict[Component, list[str]] = {}
