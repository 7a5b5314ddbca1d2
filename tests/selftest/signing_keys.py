"""Key files as operators have them, made with ``cryptography`` for the signing selftests: an OpenSSH or PEM
PKCS#8 Ed25519 private key, its public key, and the wrong things an operator may hand ``--sign-key``."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization as ser
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

#: seed bytes 0..31: its public key's fingerprint as ``ssh-keygen -lf KEY.pub`` printed it (OpenSSH 9, 2026)
FIXED_SEED = bytes(range(32))
FIXED_FINGERPRINT = "SHA256:lbmsoA0yIEcEiVDRnMWuzm+nV+3ZEEpVIURqFoeSspg"


def write_key(path: Path, *, pem: bool = False, seed: bytes | None = None, passphrase: bytes | None = None) -> Path:
    """An Ed25519 private key at ``path`` (OpenSSH, or PEM PKCS#8 with ``pem``) and its ``.pub`` beside it."""
    key = Ed25519PrivateKey.from_private_bytes(seed) if seed is not None else Ed25519PrivateKey.generate()
    encryption = ser.BestAvailableEncryption(passphrase) if passphrase else ser.NoEncryption()
    form = ser.PrivateFormat.PKCS8 if pem else ser.PrivateFormat.OpenSSH
    path.write_bytes(key.private_bytes(ser.Encoding.PEM, form, encryption))
    path.chmod(0o600)
    public = key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH)
    path.with_name(path.name + ".pub").write_bytes(public + b" operator@site\n")
    return path


def public_key(directory: Path) -> Path:
    """An OpenSSH public key line where the private key belongs."""
    return write_key(directory / "operator_ed25519").with_name("operator_ed25519.pub")


def pem_public_key(directory: Path) -> Path:
    path = directory / "operator.pub.pem"
    key = Ed25519PrivateKey.generate().public_key()
    path.write_bytes(key.public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))
    return path


def rsa_key(directory: Path) -> Path:
    path = directory / "id_rsa"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.OpenSSH, ser.NoEncryption()))
    return path


def ecdsa_key(directory: Path) -> Path:
    path = directory / "ec.pem"
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()))
    return path


def encrypted_key(directory: Path) -> Path:
    """PEM PKCS#8 under a passphrase (an OpenSSH one needs the bcrypt module to be made here; reading one
    without a passphrase fails the same way in ``cryptography``, before any bcrypt is needed)."""
    return write_key(directory / "locked_ed25519", pem=True, passphrase=b"correct horse")


def not_a_key(directory: Path) -> Path:
    path = directory / "notes.txt"
    path.write_text("the key is in the safe\n")
    return path
