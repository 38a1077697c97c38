"""The webhook's certificates: a throwaway CA and one serving certificate it signs.

The CA's private key is discarded once the serving certificate is signed: a rotation makes a new
CA, so no signing key is ever stored in the cluster. ECDSA P-256 keeps generation fast (init
containers of every replica run this) and is accepted by kube-apiserver and kube-scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BACKDATE = timedelta(minutes=5)  # tolerate clock skew between this pod and kube-apiserver


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """PEM texts as they go into the Secret (`ca.crt` may hold more than one CA during rotation)."""

    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class CertInfo:
    not_before: datetime
    not_after: datetime
    dns_names: frozenset[str]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def issue(dns_names: list[str], validity: timedelta, now: datetime) -> TlsMaterial:
    """A new CA and a serving certificate for `dns_names` (the first is also the CN), both valid from
    `now - BACKDATE` for `validity`."""
    if not dns_names:
        raise ValueError("at least one DNS name is needed")
    start, end = now - BACKDATE, now + validity
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"vgpu-scheduler-ca@{int(now.timestamp())}")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(dns_names[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return TlsMaterial(
        ca_pem=ca.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def cert_info(pem: bytes) -> CertInfo:
    """Validity and DNS SANs of the first certificate in `pem`; ValueError when it is not one."""
    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = frozenset(san.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        names = frozenset()
    return CertInfo(cert.not_valid_before_utc, cert.not_valid_after_utc, names)


def key_matches(cert_pem: bytes, key_pem: bytes) -> bool:
    """Does the private key belong to the certificate? False for anything unreadable."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    pub = serialization.PublicFormat.SubjectPublicKeyInfo
    enc = serialization.Encoding.DER
    return bool(cert.public_key().public_bytes(enc, pub) == key.public_key().public_bytes(enc, pub))


def issued_by_any(cert_pem: bytes, ca_bundle_pem: bytes) -> bool:
    """Is the certificate signed by one of the CAs in the bundle? False for anything unreadable."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        cas = x509.load_pem_x509_certificates(ca_bundle_pem)
    except ValueError:
        return False
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError):
            continue
        return True
    return False


def live_cas(ca_bundle_pem: bytes, now: datetime, limit: int) -> list[bytes]:
    """The first `limit` CAs of a bundle that are still valid at `now`, as PEM (unreadable: none)."""
    try:
        cas = x509.load_pem_x509_certificates(ca_bundle_pem)
    except ValueError:
        return []
    live = [c for c in cas if c.not_valid_after_utc > now]
    return [c.public_bytes(serialization.Encoding.PEM) for c in live[:limit]]
