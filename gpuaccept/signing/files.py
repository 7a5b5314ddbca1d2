"""A detached signature beside each signed file: ``<file>.sig``, and the check of a file against it.

The ``.sig`` is a small JSON document (read back through pydantic, unknown keys refused): what was signed
(``signed``: the file's role and name, its SHA-256 and size, when, by which key's fingerprint, and for a
summary the SHA-256 of the run record it was rendered from), the signer's public key as an OpenSSH line,
and the Ed25519 signature over the canonical JSON of ``signed`` (sorted keys, no spaces).

Signing a statement about the file, rather than the file's bytes alone, is what lets the check name
what went wrong: a signature that does not verify means the ``.sig`` itself was changed (or made by
another key); a signature that verifies over a SHA-256 the file no longer has means the file was
changed after it was signed. Record and summary each have their own ``.sig``, and the summary's names
the record it shows: one summary page per reports folder is overwritten by every run, while each run
keeps its record, so a signed old record still verifies after a later run.

A file written again without a key loses its old ``.sig`` (``drop_signature``): a stale signature
beside a new file would read as tampering.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuaccept.signing.keys import KeyUnusable, PublicKey, SigningKey

__all__ = [
    "FORMAT",
    "Checked",
    "Role",
    "SignatureFile",
    "Signed",
    "check_file",
    "drop_signature",
    "sha256_of",
    "sign_file",
    "signature_path",
]

FORMAT: Literal["gpuaccept.signature/1"] = "gpuaccept.signature/1"
Role = Literal["record", "summary"]
_SHA256 = r"^[0-9a-f]{64}$"


class Signed(BaseModel):
    """What a signature vouches for."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    file: str
    sha256: str = Field(pattern=_SHA256)
    size: int = Field(ge=0)
    signed_at: str
    key: str
    #: a summary's: the SHA-256 of the run record it was rendered from
    rendered_from: str | None = Field(default=None, pattern=_SHA256)

    def canonical(self) -> bytes:
        """The bytes the signature is over: sorted keys, no spaces, ASCII."""
        return json.dumps(self.model_dump(), sort_keys=True, separators=(",", ":")).encode()


class SignatureFile(BaseModel):
    """A ``<file>.sig`` document."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["gpuaccept.signature/1"]
    signed: Signed
    public_key: str
    signature: str


def signature_path(path: Path) -> Path:
    return path.with_name(path.name + ".sig")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sign_file(path: Path, key: SigningKey, role: Role, *, rendered_from: Path | None = None) -> Path:
    """Write ``<path>.sig`` (atomically: a reader never sees half of one); return its path."""
    signed = Signed(
        role=role,
        file=path.name,
        sha256=sha256_of(path),
        size=path.stat().st_size,
        signed_at=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        key=key.public.fingerprint,
        rendered_from=sha256_of(rendered_from) if rendered_from is not None else None,
    )
    document = SignatureFile(
        format=FORMAT,
        signed=signed,
        public_key=key.public.openssh,
        signature=base64.b64encode(key.sign(signed.canonical())).decode(),
    )
    target = signature_path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(document.model_dump_json(indent=2) + "\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def drop_signature(path: Path) -> None:
    """Remove ``<path>.sig``, if any: ``path`` was written again without a key."""
    signature_path(path).unlink(missing_ok=True)


@dataclass(frozen=True)
class Checked:
    """One file held against its ``.sig``. ``problem`` is None when the file is as signed; ``unsigned``
    when there is no ``.sig`` at all; ``signed`` and ``key`` are set once the signature verified."""

    path: Path
    problem: str | None = None
    unsigned: bool = False
    signed: Signed | None = None
    key: PublicKey | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def check_file(path: Path, role: Role, trusted: PublicKey | None = None) -> Checked:
    """Hold ``path`` against ``<path>.sig``: the signature must verify (by ``trusted`` when given) and the
    file must still have the SHA-256 it vouches for. Every answer names the file."""
    sig = signature_path(path)
    if not sig.is_file():
        return Checked(path, f"{path}: not signed (no {sig.name} beside it)", unsigned=True)
    try:
        document = SignatureFile.model_validate_json(sig.read_bytes())
        key = PublicKey.from_openssh(document.public_key)
        signature = base64.b64decode(document.signature, validate=True)
    except (OSError, ValidationError, KeyUnusable, binascii.Error) as exc:
        return Checked(path, f"{sig}: not a gpuaccept signature: {_first_line(exc)}")
    signed = document.signed
    if trusted is not None and key.fingerprint != trusted.fingerprint:
        return Checked(path, f"{sig}: signed by {key.fingerprint}, not by the given key {trusted.fingerprint}")
    if not key.verifies(signature, signed.canonical()) or signed.key != key.fingerprint:
        return Checked(path, f"{sig}: the signature does not verify: the signature file was changed")
    if signed.role != role:
        return Checked(path, f"{sig}: signs a {signed.role} ({signed.file}), not this {role}", signed=signed, key=key)
    now = sha256_of(path)
    if now != signed.sha256:
        return Checked(
            path,
            f"{path}: CHANGED after it was signed on {signed.signed_at} (sha256 now {now[:16]}..., "
            f"signed {signed.sha256[:16]}...)",
            signed=signed,
            key=key,
        )
    return Checked(path, signed=signed, key=key)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if len(text) == 1 else " ".join(text[:3])
