"""A record the customer can verify: the run record and the acceptance summary signed with the operator's key.

Opt-in (``--sign-key PATH`` / ``GPUACCEPT_SIGN_KEY``, and ``gpuaccept-report --sign-key``): each signed
file gets a detached signature beside it, ``<file>.sig`` (``files.py``), and ``gpuaccept-verify`` checks
them offline (``cli.py``), naming the file that was changed after it was signed.

Ed25519 through the ``cryptography`` package (``keys.py``): a well-kept library on OpenSSL, which reads
the key formats an operator already has (``ssh-keygen -t ed25519``'s OpenSSH private key,
``openssl genpkey -algorithm ed25519``'s PEM PKCS#8) and prints the key's fingerprint as OpenSSH does
(``SHA256:...``, what ``ssh-keygen -lf KEY.pub`` shows), so a customer can hold it against the one the
operator gave them. Ed25519 has no parameters to choose wrongly and signs deterministically. No own
cryptography here: hashing is ``hashlib``'s SHA-256, signing and verifying are ``cryptography``'s.

This package imports only the leaf ``gpuaccept.errors`` (its file reader names the key file that cannot be read):
the plugin, the report and the verify command all use it.
"""
