"""A record the customer can verify (issue 43, item 4): the run record and the summary signed with the
operator's Ed25519 key, and ``gpuaccept-verify`` naming the file that was changed after it was signed.

The signatures here are real (``cryptography``'s Ed25519 over a real record's bytes); the record is the
synthetic H200 run of ``report_records.gpu_record``. The signed run end to end, through srun on the
loopback cluster, is ``test_verdict_rules.py``'s inner session (it runs with ``--sign-key``); a bad key
refused with exit 4 before any test is ``test_bad_input.py``'s rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuaccept.judging.verdict import EXIT_TEST_HOOKS
from gpuaccept.report.html import main as report_main
from gpuaccept.report.summary import write_summary
from gpuaccept.signing.cli import EXIT_CHANGED, EXIT_UNSIGNED, EXIT_USAGE, verify
from gpuaccept.signing.cli import main as verify_main
from gpuaccept.signing.files import check_file, sha256_of, sign_file, signature_path
from gpuaccept.signing.keys import KeyUnusable, load_public_key, load_signing_key

from . import signing_keys as keys
from .conftest import run_inner, write_suite
from .report_records import gpu_record

pytestmark = pytest.mark.selftest

SUMMARY = '<!DOCTYPE html><html><body><div class="big">ACCEPTED</div><td>matmul 812.3 TFLOPS</td></body></html>\n'


@pytest.fixture()
def signed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A run record and its summary signed with the operator's key: (record, summary, key)."""
    key = keys.write_key(tmp_path / "operator_ed25519")
    signer = load_signing_key(key)
    runs = tmp_path / "reports" / "runs"
    runs.mkdir(parents=True)
    record = runs / "latest.json"
    record.write_text(json.dumps(gpu_record(), indent=2))
    sign_file(record, signer, "record")
    summary = write_summary(tmp_path / "reports" / "summary.html", SUMMARY, signer=signer, rendered_from=record)
    return record, summary, key


def _verify(capsys: pytest.CaptureFixture[str], *argv: Path | str) -> tuple[int, str, str]:
    code = verify_main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_fingerprint_is_the_one_ssh_keygen_prints(tmp_path):
    key = keys.write_key(tmp_path / "fixed", seed=keys.FIXED_SEED)
    assert load_signing_key(key).public.fingerprint == keys.FIXED_FINGERPRINT
    assert load_public_key(key.with_name("fixed.pub")).fingerprint == keys.FIXED_FINGERPRINT
    pem = keys.write_key(tmp_path / "fixed.pem", pem=True, seed=keys.FIXED_SEED)
    assert load_signing_key(pem).public.fingerprint == keys.FIXED_FINGERPRINT  # openssl genpkey's PKCS#8 too


def test_sign_and_verify_round_trip(signed, capsys):
    record, summary, key = signed
    code, out, err = _verify(capsys, "--record", record, "--summary", summary, "--pubkey", f"{key}.pub")
    fingerprint = load_signing_key(key).public.fingerprint
    assert code == 0, err
    assert out.splitlines()[-1] == f"verified, signed by {fingerprint}"
    assert f"{record}: as signed on " in out and f"{summary}: as signed on " in out
    code, out, _ = _verify(capsys, "--record", record)  # without --pubkey: the fingerprint to compare
    assert code == 0 and f"verified, signed by {fingerprint}" in out and "no --pubkey given" in out


def test_one_figure_changed_in_the_record_names_the_record(signed, capsys):
    record, summary, key = signed
    text = record.read_text()
    figure = re.search(r'"observed": (\d+\.\d+)', text)
    assert figure is not None
    record.write_text(text.replace(figure.group(0), f'"observed": {float(figure.group(1)) + 1.0}', 1))
    code, out, err = _verify(capsys, "--record", record, "--summary", summary, "--pubkey", f"{key}.pub")
    assert code == EXIT_CHANGED
    assert f"{record}: CHANGED after it was signed" in err
    assert f"{summary}: as signed" in out, "the untouched summary is not named"
    assert err.splitlines()[-1] == f"NOT verified: {record}"


def test_an_edited_summary_names_the_summary(signed, capsys):
    record, summary, key = signed
    summary.write_text(SUMMARY.replace("812.3", "912.3"))
    code, out, err = _verify(capsys, "--record", record, "--summary", summary, "--pubkey", f"{key}.pub")
    assert code == EXIT_CHANGED
    assert f"{summary}: CHANGED after it was signed" in err and f"{record}: as signed" in out
    assert err.splitlines()[-1] == f"NOT verified: {summary}"


def test_both_edited_are_both_named(signed, capsys):
    record, summary, _ = signed
    record.write_text(record.read_text().replace('"passed"', '"failed"', 1))
    summary.write_text(SUMMARY.replace("ACCEPTED", "ACCEPTED!"))
    code, _, err = _verify(capsys, "--record", record, "--summary", summary)
    assert code == EXIT_CHANGED and err.splitlines()[-1] == f"NOT verified: {record}, {summary}"


def test_a_signature_rewritten_to_hide_an_edit_does_not_verify(signed, capsys):
    """Whoever edits the record and puts its new SHA-256 into the .sig cannot sign that: the .sig is named."""
    record, _, _ = signed
    record.write_text(record.read_text().replace('"passed"', '"failed"', 1))
    sig = signature_path(record)
    document = json.loads(sig.read_text())
    document["signed"]["sha256"] = sha256_of(record)
    sig.write_text(json.dumps(document))
    code, _, err = _verify(capsys, "--record", record)
    assert code == EXIT_CHANGED and f"{sig}: the signature does not verify" in err


def test_another_key_than_the_given_one_fails(signed, tmp_path, capsys):
    record, _, key = signed
    other = keys.write_key(tmp_path / "someone_else")
    code, _, err = _verify(capsys, "--record", record, "--pubkey", f"{other}.pub")
    fingerprint = load_signing_key(key).public.fingerprint
    assert code == EXIT_CHANGED and f"signed by {fingerprint}, not by the given key" in err


def test_a_summary_of_another_record_is_named(signed, tmp_path):
    record, summary, key = signed
    other = record.with_name("20261020T100000Z.json")
    other.write_text(json.dumps(gpu_record(), indent=1))
    sign_file(other, load_signing_key(key), "record")
    checks = verify(other, summary, load_public_key(Path(f"{key}.pub")))
    assert checks[0].ok and not checks[1].ok
    assert f"{summary}: is the summary of another run record" in str(checks[1].problem)


def test_a_missing_signature_is_said(signed, capsys):
    record, summary, _ = signed
    signature_path(summary).unlink()
    code, _, err = _verify(capsys, "--record", record, "--summary", summary)
    assert code == EXIT_UNSIGNED and f"{summary}: not signed (no summary.html.sig beside it)" in err
    code, _, err = _verify(capsys, "--record", record.with_name("nope.json"))
    assert code == EXIT_USAGE and "nope.json: no such file" in err


def test_written_again_without_a_key_the_old_signature_goes(signed):
    """A stale .sig beside a page written again would read as tampering: it goes with the old page."""
    _, summary, _ = signed
    write_summary(summary, SUMMARY.replace("812.3", "799.0"))
    assert not signature_path(summary).exists()


BAD_KEYS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing": (lambda d: d / "nope", "nope: no such file"),
    "a folder": (lambda d: d, "is a folder, not a key file"),
    "an OpenSSH public key": (keys.public_key, "is a public key; signing needs the private key"),
    "a PEM public key": (keys.pem_public_key, "is a public key"),
    "an RSA key": (keys.rsa_key, "is an RSA key; gpuaccept signs with Ed25519 only"),
    "an ECDSA key": (keys.ecdsa_key, "is an ECDSA key; gpuaccept signs with Ed25519 only"),
    "a passphrase": (keys.encrypted_key, "is protected by a passphrase"),
    "not a key": (keys.not_a_key, "is not a PEM (PKCS#8) or OpenSSH private key"),
}


@pytest.mark.parametrize("row", sorted(BAD_KEYS))
def test_a_key_that_cannot_sign_is_refused_naming_the_file(tmp_path, row):
    make, expected = BAD_KEYS[row]
    path = make(tmp_path)
    with pytest.raises(KeyUnusable, match=re.escape(expected)) as caught:
        load_signing_key(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_the_report_signs_a_summary_it_renders_and_refuses_an_edited_record(tmp_path, capsys):
    """``gpuaccept-report --summary-only --record R --sign-key K``: the page shows the fingerprint and is
    signed; an unsigned record is signed with it; a signed record changed since is refused (exit 2)."""
    key = keys.write_key(tmp_path / "operator_ed25519")
    fingerprint = load_signing_key(key).public.fingerprint
    runs = tmp_path / "reports" / "runs"
    runs.mkdir(parents=True)
    record = runs / "20261120T100000Z.json"
    record.write_text(json.dumps(gpu_record()))
    argv = ["--summary-only", "--record", str(record), "--root", str(tmp_path), "--sign-key", str(key)]
    assert report_main(argv) == 0, capsys.readouterr().err
    summary = tmp_path / "reports" / "summary.html"
    assert f'<meta name="gpuaccept-signed-by" content="{fingerprint}">' in summary.read_text()
    assert f"signed by {fingerprint}" in capsys.readouterr().out
    assert [c.ok for c in verify(record, summary, load_public_key(Path(f"{key}.pub")))] == [True, True]
    record.write_text(record.read_text().replace('"passed"', '"failed"', 1))
    assert report_main(argv) == 2
    assert f"{record}: CHANGED after it was signed" in capsys.readouterr().err


INNER = """
from gpuaccept.probes import specs
import pytest
pytestmark = pytest.mark.acceptance

def test_x(node, cluster, judge):
    cluster.run(specs.HYGIENE, nodes=[node])
    judge.check("nofile", 65536, node=node)
"""


def test_a_run_without_the_key_leaves_no_stale_signature(tmp_path):
    """Signed by the plugin at the session's end (record, latest.json, summary); the next run without a key
    takes latest.json's and the summary's signatures away, and the signed run's own record still verifies."""
    suite = write_suite(tmp_path / "suite", INNER)
    key = keys.write_key(tmp_path / "operator_ed25519")
    first = run_inner(suite, "-m", "acceptance", "--launcher", "local", "--sign-key", str(key))
    assert first.returncode == EXIT_TEST_HOOKS, first.output[-2000:]  # passed, with the selftest hook set
    kept = first.record_path.with_name("signed.json")
    first.record_path.rename(kept)
    signature_path(first.record_path).rename(signature_path(kept))
    latest, summary = suite / "latest.json", suite / "reports" / "summary.html"
    trusted = load_public_key(Path(f"{key}.pub"))
    assert [c.ok for c in verify(latest, summary, trusted)] == [True, True]
    assert f'<meta name="gpuaccept-signed-by" content="{trusted.fingerprint}">' in summary.read_text()
    assert 'id="signed-by"' in summary.read_text()
    second = run_inner(suite, "-m", "acceptance", "--launcher", "local")
    assert second.returncode == EXIT_TEST_HOOKS, second.output[-2000:]
    assert not signature_path(latest).exists() and not signature_path(summary).exists()
    assert "gpuaccept-signed-by" not in summary.read_text() and 'id="signed-by"' not in summary.read_text()
    assert check_file(kept, "record", trusted).ok
