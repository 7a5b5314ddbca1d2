"""Safe to hand to a tenant (issue 49), its one home: GPU memory left by the last job (SEC21), software below a
fix of NVIDIA's security bulletins and off the site's approved list (VMAAS07, CNP09, ATTEST01), the root of
trust (SEC22) and the site's health agents (BFX04). ``tests/acceptance/test_tenant.py`` hands the probes'
typed payloads (``gpuaccept.contracts.tenant``) and the site's ``tenant:`` declaration
(``gpuaccept.thresholds.tenant_site.TenantSite``) to the judges here.

Residue is a figure with a limit (``gpu_residue_pattern_bytes``, none allowed); what the driver left
otherwise (zeros or other bytes) is shown, never judged: a driver may hand memory over scrubbed to any value.
The rest are named expectations whose expected value the judge computes (``judge.expect``): the failure
reads "<observed> != <expected>" and names the node, component, version, fix and bulletin.

What a site does not declare is not judged silently: ``*_absent`` says why a test does not apply, naming the
site key that would make it apply (the InfiniBand rule: declared absent is judged where declared).
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from gpuaccept.contracts.judge import JudgeLike, gpu_label
from gpuaccept.contracts.tenant import (
    AgentRecord,
    AgentState,
    ResidueGpu,
    ResidueRecord,
    SoftwareRecord,
    TopValue,
    TrustRecord,
)
from gpuaccept.thresholds.bulletins import Catalogue, UnreadableVersion, findings
from gpuaccept.thresholds.tenant_site import RootOfTrust, TenantSite

__all__ = [
    "NO_KNOWN_VULNERABLE",
    "agents_absent",
    "judge_agents",
    "judge_approved",
    "judge_bulletins",
    "judge_inherited",
    "judge_residue",
    "judge_scanner_proof",
    "judge_trust",
    "residue_absent",
    "software_versions",
    "trust_absent",
]

#: what ``software_bulletin`` expects of every installed component
NO_KNOWN_VULNERABLE = "no known-vulnerable version"


def _gpu(gpu: ResidueGpu) -> str | None:
    return gpu_label({"index": gpu.index, "pci_bus_id": gpu.pci_bus_id})


# ---- SEC21: residue ------------------------------------------------------------------------------------


def residue_absent(scan: ResidueRecord, node: str) -> str | None:
    """Why the residue test does not apply to ``node``: no GPU the scan could use (the acceptance test only
    asks nodes that declare GPUs, so this is a node without CUDA)."""
    if not scan.cuda:
        return f"{node}: no GPU to scan ({scan.why or 'no CUDA'})"
    return None


def _scanned(step: ResidueRecord, metric: str, judge: JudgeLike, node: str) -> Sequence[ResidueGpu]:
    """The GPUs a residue step (fill, scan, plant) read; none, with ``metric`` unreadable, where it had no CUDA."""
    if not step.cuda:
        judge.unreadable(metric, step.why or "no CUDA", node=node)
        return ()
    return step.gpus


def judge_residue(scan: ResidueRecord, judge: JudgeLike, node: str, fill: ResidueRecord | None = None) -> None:
    """Each GPU's scan: bytes of this run's pattern found (judged: none allowed), non-zero bytes and the
    commonest values (shown: what the driver left), beside what the fill step wrote on that GPU."""
    filled = {g.uuid or str(g.index): g for g in fill.gpus} if fill is not None else {}
    for gpu in _scanned(scan, "gpu_residue_pattern_bytes", judge, node):
        wrote = filled.get(gpu.uuid or str(gpu.index))
        extra = {
            "scanned_bytes": gpu.bytes,
            "filled_bytes": wrote.bytes if wrote is not None else None,
            "uuid": gpu.uuid,
            "seed": scan.seed,
            "tag": scan.tag,
        }
        judge.check("gpu_residue_pattern_bytes", gpu.pattern_bytes, node=node, gpu=_gpu(gpu), **extra)
        judge.info(
            "gpu_residue_nonzero_bytes",
            gpu.nonzero_bytes,
            node=node,
            gpu=_gpu(gpu),
            scanned_bytes=gpu.bytes,
            driver_left=_held(gpu.nonzero_bytes, gpu.top_values),
            sampled_words=gpu.sampled_words,
        )


def _held(nonzero: int | None, top: Sequence[TopValue] | None) -> str:
    """What a scan saw, in words: zeros, or the commonest non-zero words of its sample."""
    if not nonzero:
        return "zeros"
    return ", ".join(f"{v.value} x{v.words}" for v in top or ()) or "non-zero bytes"


def judge_inherited(fill: ResidueRecord, judge: JudgeLike, node: str) -> None:
    """What the fill step's fresh allocation held before the pattern went in: the memory the GPU's previous job
    (in a suite run, the fine-tunes: the tenant section runs after training) left a new process. The driver
    hands memory over zeroed, so any non-zero byte is that job's data."""
    for gpu in _scanned(fill, "gpu_residue_inherited_nonzero_bytes", judge, node):
        judge.check(
            "gpu_residue_inherited_nonzero_bytes",
            gpu.inherited_nonzero_bytes,
            node=node,
            gpu=_gpu(gpu),
            scanned_bytes=gpu.bytes,
            previous_job_left=_held(gpu.inherited_nonzero_bytes, gpu.inherited_top_values),
        )


def judge_scanner_proof(proof: ResidueRecord, judge: JudgeLike, node: str) -> None:
    """The scanner finds a pattern planted in the same process (fill, free, scan): without this, a scan that
    finds nothing proves nothing. ``proof`` is a plant step's record, or a scan step's that planted after its
    scan (``--plant-seed``)."""
    for gpu in _scanned(proof, "gpu_residue_scanner_proof", judge, node):
        after_scan = proof.mode == "scan"
        found = gpu.proof_pattern_bytes if after_scan else gpu.pattern_bytes
        scanned = gpu.proof_bytes if after_scan else gpu.bytes
        if found is None:
            judge.unreadable("gpu_residue_scanner_proof", "the scan step planted no pattern", node=node, gpu=_gpu(gpu))
            continue
        observed = "found" if found > 0 else f"not found in {scanned} bytes scanned"
        judge.expect("gpu_residue_scanner_proof", observed, "found", node=node, gpu=_gpu(gpu), pattern_bytes=found)


# ---- software: bulletins and the approved list --------------------------------------------------------


def software_versions(sw: SoftwareRecord) -> dict[str, str | None]:
    """Component -> version as the bulletins and the approved list name them; the exporter's
    ``<DCGM>-<exporter>`` becomes its exporter part (what the bulletins version), VBIOS the node's distinct
    ones joined."""
    exporter = sw.dcgm_exporter.rsplit("-", 1)[-1] if sw.dcgm_exporter else None
    vbios = sorted({g.vbios for g in sw.gpus if g.vbios})
    os_name = " ".join(p for p in (sw.os_id, sw.os_version_id) if p) or None
    return {
        "gpu_driver": sw.driver,
        "cuda_driver": sw.cuda_driver,
        "vbios": ", ".join(vbios) or None,
        "kernel": sw.kernel,
        "os": os_name,
        "dcgm": sw.dcgm,
        "dcgm_exporter": exporter,
    }


def judge_bulletins(sw: SoftwareRecord, catalogue: Catalogue, judge: JudgeLike, node: str) -> None:
    """Every version shown; each installed component the catalogue holds judged against every bulletin: one
    failure per bulletin it is below (naming node, component, version, fix and bulletin), else one pass."""
    versions = software_versions(sw)
    for component, version in versions.items():
        judge.info("software_version", version or "not installed", node=node, field=component)  # never None
    for component in ("gpu_driver", "dcgm", "dcgm_exporter"):
        version = versions[component]
        if version is None:
            continue  # not installed: nothing of it to be vulnerable (the agent test judges a declared agent)
        try:
            found = findings(component, version, catalogue)
        except UnreadableVersion as unreadable:
            judge.unreadable("software_bulletin", f"{node}: {unreadable}", node=node, field=component, seen=version)
            continue
        for f in found:
            fix = f"fixed in {f.fixed}" if f.fixed else f"no fix for {f.line}"
            observed = f"{component} {version} ({fix}: bulletin {f.bulletin} {f.title})"
            judge.expect(
                "software_bulletin",
                observed,
                NO_KNOWN_VULNERABLE,
                node=node,
                field=component,
                version=version,
                fixed=f.fixed,
                bulletin=f.bulletin,
                cves=f.cves,
                url=f.url,
            )
        if not found:
            judge.expect(
                "software_bulletin",
                NO_KNOWN_VULNERABLE,
                NO_KNOWN_VULNERABLE,
                node=node,
                field=component,
                version=version,
                catalogue=catalogue.source,
            )


def judge_approved(sw: SoftwareRecord, site: TenantSite | None, judge: JudgeLike, node: str) -> None:
    """Each component the site lists approved versions for: the node's version matches one of them."""
    if site is None:
        return
    versions = software_versions(sw)
    for component, patterns in site.approved.items():
        version = versions.get(component)
        if version is not None and not any(c.isdigit() for c in version):
            why = (
                f"{node}: {component} reads {version!r}, no version in it: it cannot be compared with the site's "
                f"approved {', '.join(patterns)}"
            )
            judge.unreadable("software_approved", why, node=node, field=component, seen=version, source=site.source)
            continue
        ok = version is not None and any(fnmatchcase(version, p) for p in patterns)
        expected = version if ok else f"one of {', '.join(patterns)}"
        judge.expect(
            "software_approved",
            version or "not installed",
            expected,
            node=node,
            field=component,
            source=site.source,
        )


# ---- SEC22: root of trust --------------------------------------------------------------------------------


def trust_absent(site: TenantSite | None, node: str) -> str | None:
    """Why the root-of-trust test does not apply: the site declares no ``tenant.root_of_trust`` (naming the
    keys to set), or declares all three absent (a VM)."""
    if site is None:
        return (
            f"{node}: the site declares no tenant: section (set tenant.root_of_trust.uefi, .secure_boot, .tpm "
            "to true, false or absent)"
        )
    rot = site.root_of_trust
    items = {"uefi": rot.uefi, "secure_boot": rot.secure_boot, "tpm": rot.tpm}
    if all(v is None for v in items.values()):
        return f"{node}: the site declares no tenant.root_of_trust (uefi, secure_boot, tpm: true, false or absent)"
    if all(v in ("absent", None) for v in items.values()):
        declared = ", ".join(f"{k}: {v}" for k, v in items.items() if v is not None)
        return f"{node}: the site declares its root of trust absent (tenant.root_of_trust {declared}; {site.source})"
    return None


def _tpm_text(version: int | None, present: bool) -> str:
    if version is not None:
        return f"TPM {version}.0" if version == 2 else f"TPM {version}.2"
    return "TPM of unreadable version" if present else "no TPM"


def judge_trust(trust: TrustRecord, site: TenantSite, judge: JudgeLike, node: str) -> None:
    """UEFI, Secure Boot and TPM where the site requires each (a node without it FAILED); shown where it
    does not; nothing recorded for an item declared absent."""
    rot: RootOfTrust = site.root_of_trust
    uefi = "UEFI" if trust.uefi else "legacy BIOS (no /sys/firmware/efi)"
    if trust.secure_boot is True and trust.setup_mode:
        secure = "setup mode (no platform key: nothing enforced)"
    elif trust.secure_boot is True:
        secure = "enabled"
    elif trust.secure_boot is False:
        secure = "disabled"
    else:
        secure = "not readable" if trust.uefi else "not available (no UEFI)"
    tpm = _tpm_text(trust.tpm_version, trust.tpm_present)
    tpm_ok = trust.tpm_version is not None and trust.tpm_version >= rot.tpm_min_version
    want_tpm = tpm if tpm_ok else f"TPM {rot.tpm_min_version}.0" + (" or later" if rot.tpm_min_version < 2 else "")
    rows = (
        ("uefi_boot", rot.uefi, uefi, "UEFI"),
        ("secure_boot", rot.secure_boot, secure, "enabled"),
        ("tpm_version", rot.tpm, tpm, want_tpm),
    )
    unread = {
        "secure_boot": trust.uefi and trust.secure_boot is None,  # UEFI, yet its SecureBoot variable not read
        "tpm_version": trust.tpm_present and trust.tpm_version is None,  # a TPM whose version was not read
    }
    for metric, required, observed, expected in rows:
        if required is True and unread.get(metric):
            why = f"{node}: {metric} reads {observed!r}: could not be compared with {expected!r}"
            judge.unreadable(metric, why, node=node, source=site.source, notes=trust.notes)
        elif required is True:
            judge.expect(metric, observed, expected, node=node, source=site.source, notes=trust.notes)
        elif required is False or required is None:
            judge.info("root_of_trust", observed, node=node, field=metric, required=required)


# ---- BFX04: health agents --------------------------------------------------------------------------------


def agents_absent(site: TenantSite | None, node: str) -> str | None:
    """Why the agent test does not apply: no agent declared (``tenant.agents``), or declared absent."""
    if site is None or site.agents is None:
        return (
            f"{node}: the site names no health agent (tenant.agents: a list of {{name, process, url, kind}}, or absent)"
        )
    if site.agents == "absent" or not site.agents:
        return f"{node}: the site declares no health agent (tenant.agents: absent; {site.source})"
    return None


def _exporter_gpus(agent: AgentState, record: AgentRecord) -> tuple[str | None, str]:
    """(observed, expected) of a DCGM exporter's GPUs against NVML's: by UUID where both have them; (None, why)
    when NVML's count could not be read, so the exporter's list has nothing to be held to."""
    want = record.nvml_gpus
    expected = f"all {want} GPUs" if want is not None else "every GPU NVML sees"
    if agent.exporter_gpus is None:
        return f"page not read ({agent.error or 'no answer'})", expected
    if record.nvml_uuids and agent.exporter_uuids:
        missing = [u for u in record.nvml_uuids if u not in set(agent.exporter_uuids)]
        if missing:
            return f"missing {', '.join(missing)} ({len(agent.exporter_uuids)} of {want} listed)", expected
        return expected, expected
    listed = len(agent.exporter_gpus)
    if want is None:
        return None, f"{listed} GPUs listed, NVML's own count unreadable: nothing to compare them with"
    if listed < want:
        gone = sorted(set(map(str, range(want))) - set(agent.exporter_gpus), key=int)
        return f"{listed} of {want} listed (missing gpu {', '.join(gone)})", expected
    return expected, expected


def judge_agents(record: AgentRecord, site: TenantSite, judge: JudgeLike, node: str) -> None:
    """Each declared agent: its process running, its URL answering, and a DCGM exporter listing every GPU."""
    declared = site.agents if isinstance(site.agents, list) else []
    states = {a.name: a for a in record.agents}
    for decl in declared:
        agent = states.get(decl.name)
        if agent is None:
            judge.unreadable("health_agent_running", f"the probe did not report agent {decl.name}", node=node)
            continue
        if decl.process:
            observed = "running" if agent.running else f"no process named {decl.process}"
            judge.expect("health_agent_running", observed, "running", node=node, field=decl.name, pids=agent.pids)
        if decl.url:
            answered = f"answering (HTTP {agent.http_status})" if agent.answered else f"no answer: {agent.error}"
            expected = answered if agent.answered else "answering"
            judge.expect("health_agent_answering", answered, expected, node=node, field=decl.name, url=decl.url)
        if decl.kind == "dcgm-exporter":
            listed, expected = _exporter_gpus(agent, record)
            if listed is None:
                judge.unreadable("health_agent_gpus", f"{node}: {expected}", node=node, field=decl.name)
                continue
            judge.expect("health_agent_gpus", listed, expected, node=node, field=decl.name, listed=agent.exporter_gpus)
