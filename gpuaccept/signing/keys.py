"""The operator's Ed25519 key: the private key that signs, the public key that verifies, its fingerprint.

Read with ``cryptography`` from the formats an operator already has: an OpenSSH private key
(``ssh-keygen -t ed25519``) or a PEM PKCS#8 one (``openssl genpkey -algorithm ed25519``); a public key
as an OpenSSH line (``KEY.pub``) or PEM (``openssl pkey -pubout``). Anything else is refused with a
line naming the file and what it is instead (a public key where the private one belongs, an RSA key, a
passphrase), since a run must not find out at its end that it cannot sign.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gpuaccept.errors import read_input_file

__all__ = ["KeyUnusable", "PublicKey", "SigningKey", "load_public_key", "load_signing_key"]

#: how to make a key gpuaccept signs with, said where a file is not one
MAKE_ONE = "make one with `ssh-keygen -t ed25519 -N '' -f KEY` or `openssl genpkey -algorithm ed25519 -out KEY`"
#: the first words of a public key's text, in the formats ``cryptography`` and OpenSSH write
_PUBLIC_STARTS = (b"ssh-", b"ecdsa-sha2-", b"sk-", b"-----BEGIN PUBLIC KEY", b"---- BEGIN SSH2 PUBLIC KEY")
#: key types that are not Ed25519, by the name an operator knows them under
_OTHER_TYPES = (
    (rsa.RSAPrivateKey, rsa.RSAPublicKey, "an RSA key"),
    (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey, "an ECDSA key"),
    (dsa.DSAPrivateKey, dsa.DSAPublicKey, "a DSA key"),
    (ed448.Ed448PrivateKey, ed448.Ed448PublicKey, "an Ed448 key"),
)


class KeyUnusable(ValueError):
    """A key file that cannot sign (or verify): the message names the file and what it is instead."""


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key, as a customer holds it to verify."""

    key: Ed25519PublicKey

    @property
    def openssh(self) -> str:
        """``ssh-ed25519 AAAA...``: the line of a ``KEY.pub`` file, carried in each signature file."""
        return self.key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()

    @property
    def fingerprint(self) -> str:
        """``SHA256:<base64>``, as ``ssh-keygen -lf KEY.pub`` prints it: SHA-256 of the key's OpenSSH wire
        form (its type name and its 32 bytes), base64 without padding."""
        blob = base64.b64decode(self.openssh.split()[1])
        return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")

    def verifies(self, signature: bytes, data: bytes) -> bool:
        try:
            self.key.verify(signature, data)
        except InvalidSignature:
            return False
        return True

    @classmethod
    def from_openssh(cls, line: str) -> PublicKey:
        """The key of an ``ssh-ed25519 AAAA...`` line; ``KeyUnusable`` for any other text."""
        try:
            key = serialization.load_ssh_public_key(line.strip().encode())
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise KeyUnusable(f"not an OpenSSH public key line: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyUnusable(f"{_kind(key)}, not Ed25519")
        return cls(key)


@dataclass(frozen=True)
class SigningKey:
    """The operator's private Ed25519 key, read once at start and held for the session's end."""

    path: Path
    key: Ed25519PrivateKey

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key.public_key())

    def sign(self, data: bytes) -> bytes:
        return self.key.sign(data)


def _kind(key: object) -> str:
    for private, public, name in _OTHER_TYPES:
        if isinstance(key, (private, public)):
            return name
    return f"a {type(key).__name__}"


def load_signing_key(path: Path) -> SigningKey:
    """The Ed25519 private key in ``path`` (OpenSSH or PEM PKCS#8, without a passphrase), or
    ``KeyUnusable`` naming the file: missing, unreadable, a public key, another type, encrypted."""
    data = read_input_file(path, "a key file", KeyUnusable)
    text = data.lstrip()
    if text.startswith(_PUBLIC_STARTS):
        raise KeyUnusable(f"{path}: is a public key; signing needs the private key (the .pub is what verifies)")
    key: object
    try:
        if text.startswith(b"-----BEGIN OPENSSH PRIVATE KEY"):
            key = serialization.load_ssh_private_key(text, password=None)
        else:
            key = serialization.load_pem_private_key(text, password=None)
    except TypeError:  # cryptography's word for "this key wants a password"
        raise KeyUnusable(
            f"{path}: is protected by a passphrase; a run signs unattended, so give an unencrypted key "
            "(kept readable by the operator alone)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise KeyUnusable(f"{path}: is not a PEM (PKCS#8) or OpenSSH private key; {MAKE_ONE}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyUnusable(f"{path}: is {_kind(key)}; gpuaccept signs with Ed25519 only: {MAKE_ONE}")
    return SigningKey(path, key)


def load_public_key(path: Path) -> PublicKey:
    """The Ed25519 public key in ``path``: an OpenSSH ``.pub`` line, PEM, or a private key file (its public
    half); ``KeyUnusable`` naming the file otherwise."""
    data = read_input_file(path, "a key file", KeyUnusable)
    text = data.lstrip()
    if text.startswith(b"-----BEGIN PUBLIC KEY"):
        try:
            key = serialization.load_pem_public_key(text)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise KeyUnusable(f"{path}: not a readable PEM public key: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise KeyUnusable(f"{path}: is {_kind(key)}, not Ed25519")
        return PublicKey(key)
    if text.startswith(_PUBLIC_STARTS):
        try:
            return PublicKey.from_openssh(text.decode(errors="replace").splitlines()[0])
        except KeyUnusable as exc:
            raise KeyUnusable(f"{path}: {exc}") from None
    if b"PRIVATE KEY" in text[:100]:
        return load_signing_key(path).public
    raise KeyUnusable(f"{path}: is not a public key (an ssh-ed25519 line or PEM) nor a private key")
