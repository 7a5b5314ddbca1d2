"""``gpuaccept-verify``: check a run record (and the summary rendered from it) against their signatures, offline.

    gpuaccept-verify --record reports/runs/latest.json [--summary reports/summary.html] [--pubkey KEY.pub]

Each file is held against its ``<file>.sig`` (``files.check_file``): the signature must verify, the file
must have the SHA-256 it signed, and a summary must be the one of this record. Every file is checked,
so an edited record and an edited summary are both named. With ``--pubkey`` the signatures must be that
key's; without, the fingerprint printed is the one to hold against what the operator gave you (a
signature proves the files are as the key's holder signed them, not who holds the key).

Exit status: 0 verified; 1 a file changed after it was signed, a signature that does not verify or was
made by another key than ``--pubkey``, or a summary of another record; 2 a usage problem (a file or the
key not found or unreadable); 3 a file is not signed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuaccept.signing.files import Checked, check_file, sha256_of
from gpuaccept.signing.keys import KeyUnusable, PublicKey, load_public_key

__all__ = ["EXIT_CHANGED", "EXIT_UNSIGNED", "EXIT_USAGE", "main", "verify"]

EXIT_CHANGED = 1
EXIT_USAGE = 2
EXIT_UNSIGNED = 3


def verify(record: Path, summary: Path | None = None, trusted: PublicKey | None = None) -> list[Checked]:
    """The record's check, then the summary's: as signed, and rendered from this record (the SHA-256 the
    record's signature vouches for, so an edited record is not named twice)."""
    checks = [check_file(record, "record", trusted)]
    if summary is None:
        return checks
    found = check_file(summary, "summary", trusted)
    signed = found.signed
    if found.ok and signed is not None:
        record_sha = checks[0].signed.sha256 if checks[0].signed is not None else sha256_of(record)
        if signed.rendered_from != record_sha:
            found = Checked(
                summary,
                f"{summary}: is the summary of another run record (rendered from sha256 "
                f"{(signed.rendered_from or 'none')[:16]}...), not of {record}",
                signed=signed,
                key=found.key,
            )
    return [*checks, found]


def _status(checks: list[Checked]) -> int:
    if all(c.ok for c in checks):
        return 0
    if any(not c.ok and not c.unsigned for c in checks):
        return EXIT_CHANGED
    return EXIT_UNSIGNED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuaccept-verify", description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True, help="the run record (its .sig beside it)")
    parser.add_argument("--summary", type=Path, help="the acceptance summary rendered from it (its .sig beside it)")
    parser.add_argument(
        "--pubkey", type=Path, help="the operator's public key (KEY.pub, PEM): the signatures must be this key's"
    )
    args = parser.parse_args(argv)
    for given in (args.record, args.summary, args.pubkey):
        if given is not None and not given.is_file():
            print(f"gpuaccept-verify: {given}: no such file", file=sys.stderr)
            return EXIT_USAGE
    try:
        trusted = load_public_key(args.pubkey) if args.pubkey is not None else None
    except KeyUnusable as exc:
        print(f"gpuaccept-verify: --pubkey {exc}", file=sys.stderr)
        return EXIT_USAGE
    checks = verify(args.record, args.summary, trusted)
    for check in checks:
        if check.ok and check.signed is not None:
            print(f"{check.path}: as signed on {check.signed.signed_at} by {check.signed.key}")
        else:
            print(check.problem, file=sys.stderr)
    status = _status(checks)
    if status:
        print(f"NOT verified: {', '.join(str(c.path) for c in checks if not c.ok)}", file=sys.stderr)
        return status
    keys = sorted({c.signed.key for c in checks if c.signed is not None})
    print(f"verified, signed by {' and '.join(keys)}")
    if trusted is None:
        print("(no --pubkey given: hold the fingerprint against the one the operator gave you)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
