"""Optional TLS for ``grace up`` (``--tls-cert``/``--tls-key``), checked before anything starts.

Why check here and not let uvicorn find out: uvicorn loads the certificate only
when it binds the port, after the store was opened, the lease taken and the
reconcile loop started, and then fails with an OpenSSL traceback. A wrong path,
an unreadable file, a key that does not belong to the certificate are operator
mistakes with one fix each, so ``grace up`` names the file and the fix and ends
before it writes anything, like every other bad file it is given.

Clients: the CLI and the training runtime verify the server's certificate
against the system's trust store, or against ``GRACE_CA_FILE`` when it is set
(a private CA, or the self-signed certificate itself).
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from grace.spec.errors import SpecError, SpecProblem

#: The environment variable naming the CA bundle clients verify the server against.
CA_FILE_ENV = "GRACE_CA_FILE"
_SOURCE = "grace up --tls-cert/--tls-key"


def check_tls_files(cert: Path | None, key: Path | None) -> None:
    """Both or neither; each a readable PEM file; the key the certificate's own.

    Raises ``SpecError`` naming the option and the fix; returns when TLS is off or usable.
    """
    if cert is None and key is None:
        return
    if cert is None or key is None:
        given, missing = (("--tls-cert", "--tls-key") if cert is not None
                          else ("--tls-key", "--tls-cert"))
        raise SpecError(_SOURCE, [SpecProblem(
            missing.lstrip("-"), f"{given} needs {missing} too: give the certificate and its "
                                 "private key (PEM files), or neither for plain HTTP")])
    problems = [p for p in (_unreadable(cert, "tls-cert", "certificate"),
                            _unreadable(key, "tls-key", "private key")) if p is not None]
    if problems:
        raise SpecError(_SOURCE, problems)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key))
    except ssl.SSLError as e:
        raise SpecError(_SOURCE, [SpecProblem(
            "tls-key", f"{cert} and {key} are not a usable certificate and key "
                       f"({e.reason or e}): give a PEM certificate and the unencrypted PEM "
                       "private key it was issued for")]) from e


def _unreadable(path: Path, option: str, what: str) -> SpecProblem | None:
    if not path.is_file():
        return SpecProblem(option, f"{path}: no such file; give the path of the {what} (PEM)")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        return SpecProblem(option, f"{path}: cannot be read ({e.strerror}); let the user "
                                   "running grace up read it")
    return None


def client_verify() -> ssl.SSLContext | bool:
    """What a client passes as ``verify``: ``GRACE_CA_FILE``'s CAs when set, else the system's."""
    ca_file = os.environ.get(CA_FILE_ENV, "").strip()
    if not ca_file:
        return True
    return ssl.create_default_context(cafile=ca_file)
