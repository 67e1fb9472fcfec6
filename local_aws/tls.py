"""A self-signed certificate for the local runtime's https front (``127.0.0.1``/``localhost``).

Unsubscribe links must be https everywhere (``shared.sending.mime``), so the local runtime serves
its HTTP front over TLS too, with a certificate made here at start-up into
``<state dir>/tls/``. An existing pair is reused while it is valid for more than a week,
so a client that trusts it (``curl --cacert``, a browser exception) keeps trusting it
across restarts of ``mailstep dev``. Local tooling trusts exactly this certificate
through :func:`client_context`; verification is never switched off. (Werkzeug's
``make_ssl_devcert`` names the host as a DNS name only, which a verifying client refuses for
``https://127.0.0.1``, and makes a new pair every time.)
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ops.loopback import PRIVATE_MODE, private_dir, write_private

HOSTS = ("127.0.0.1", "localhost")
VALID_DAYS = 825  # the longest validity Apple clients accept for a TLS server certificate
RENEW_BEFORE = timedelta(days=7)


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path


def ensure_certificate(directory: Path, *, now: datetime | None = None) -> TlsFiles:
    """``directory/cert.pem`` and ``directory/key.pem``: reused when still valid, else made."""
    files = TlsFiles(cert=directory / "cert.pem", key=directory / "key.pem")
    moment = now or datetime.now(UTC)
    if _reusable(files, moment):
        if files.key.stat().st_mode & 0o077:  # a key others could read is made its owner's only
            files.key.chmod(PRIVATE_MODE)
        return files
    private_dir(directory)
    cert_pem, key_pem = generate(moment)
    write_private(files.key, key_pem)  # the private key: its owner's only (0600)
    files.cert.write_bytes(cert_pem)
    return files


def generate(now: datetime) -> tuple[bytes, bytes]:
    """A self-signed P-256 certificate for :data:`HOSTS` (server auth only): (cert, key) PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mailstep local runtime"),
            x509.NameAttribute(NameOID.COMMON_NAME, HOSTS[0]),
        ]
    )
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(HOSTS[0])), x509.DNSName(HOSTS[1])]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _reusable(files: TlsFiles, now: datetime) -> bool:
    if not (files.cert.is_file() and files.key.is_file()):
        return False
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        server_context(files)  # the key matches the certificate
    except (ValueError, OSError, ssl.SSLError, x509.ExtensionNotFound):
        return False
    covered = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    covered |= set(names.get_values_for_type(x509.DNSName))
    valid = cert.not_valid_before_utc <= now < cert.not_valid_after_utc - RENEW_BEFORE
    return valid and set(HOSTS) <= covered


def server_context(files: TlsFiles) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files.cert, files.key)
    return context


def client_context(cert: Path | str) -> ssl.SSLContext:
    """A verifying client context (hostname checked) that trusts only the runtime's certificate."""
    return ssl.create_default_context(cafile=str(cert))
