"""``grace up --tls-cert --tls-key``: HTTPS only, verified by clients against GRACE_CA_FILE;
a bad certificate or key ends grace up with the option and the fix before anything starts."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grace_up import grace_up
from helpers import LAB, REPO

from grace.control.tls import check_tls_files, client_verify
from grace.spec.errors import SpecError


def self_signed(where: Path, name: str = "grace") -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key (EC P-256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    where.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = where / f"{name}.crt", where / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _problems(cert: Path | None, key: Path | None) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        check_tls_files(cert, key)
    return [(p.path, p.message) for p in e.value.problems]


def test_a_matching_pair_passes_and_none_means_plain_http(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    check_tls_files(cert, key)
    check_tls_files(None, None)


def test_bad_tls_files_are_named_with_the_fix(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "a", "a")
    _, other_key = self_signed(tmp_path / "b", "b")
    assert _problems(cert, None) == [("tls-key", "--tls-cert needs --tls-key too: give the "
                                      "certificate and its private key (PEM files), or neither "
                                      "for plain HTTP")]
    assert [p for p, _ in _problems(None, key)] == ["tls-cert"]
    missing = _problems(tmp_path / "nope.crt", key)
    assert missing[0][0] == "tls-cert" and "no such file" in missing[0][1]
    mismatched = _problems(cert, other_key)
    assert mismatched[0][0] == "tls-key" and "not a usable certificate and key" in mismatched[0][1]
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    assert "not a usable" in _problems(garbage, key)[0][1]


@pytest.mark.slow
def test_grace_up_refuses_a_bad_pair_before_it_writes_anything(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path / "a", "a")
    _, other_key = self_signed(tmp_path / "b", "b")
    state = tmp_path / "state"
    out = subprocess.run(
        [sys.executable, "-m", "grace.cli.main", "up", "--cluster", str(LAB), "--port", "1",
         "--state-dir", str(state), "--tls-cert", str(cert), "--tls-key", str(other_key)],
        cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stderr.split())  # rich wraps long lines
    assert "tls-key:" in said and "not a usable certificate and key" in said
    assert not state.exists()  # no store, no token, no directory


def test_client_verify_uses_grace_ca_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, _ = self_signed(tmp_path)
    monkeypatch.delenv("GRACE_CA_FILE", raising=False)
    assert client_verify() is True
    monkeypatch.setenv("GRACE_CA_FILE", str(cert))
    assert isinstance(client_verify(), ssl.SSLContext)


@pytest.mark.slow
def test_grace_up_over_tls_answers_https_only(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "tls")
    trust = ssl.create_default_context(cafile=str(cert))
    with grace_up(tmp_path / "state", "--tls-cert", str(cert), "--tls-key", str(key),
                  scheme="https", verify=trust) as server:
        assert server.url.startswith("https://")
        r = httpx.get(f"{server.url}/healthz", verify=trust, timeout=10)
        assert r.status_code == 200, r.text
        # plain HTTP to the same port is not served
        with pytest.raises(httpx.HTTPError):
            httpx.get(server.url.replace("https://", "http://") + "/healthz", timeout=5)
        # without the CA the certificate is not trusted
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{server.url}/healthz", timeout=5)
        # the CLI talks https, verifying against GRACE_CA_FILE, with the admin token
        env = {**os.environ, "GRACE_URL": server.url,
               "GRACE_TOKEN_FILE": str(server.state_dir / "admin.token")}
        env.pop("GRACE_TOKEN", None)
        cli = [sys.executable, "-m", "grace.cli.main", "nodes", "--json"]
        ok = subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**env, "GRACE_CA_FILE": str(cert)})
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert '"name"' in ok.stdout
        env.pop("GRACE_CA_FILE", None)
        refused = subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=60,
                                 env=env)
        assert refused.returncode == 3, refused.stdout + refused.stderr
        assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr
