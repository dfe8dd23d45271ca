"""Credentials of a secure local deployment (``fedrec deploy-local N --secure``).

Flower 1.42 secures a deployment with TLS (the SuperLink presents a certificate that the
SuperNodes and the ``flwr`` CLI check against a CA) and SuperNode authentication (the
SuperLink runs with ``--enable-supernode-auth`` and accepts only the SuperNodes whose public
key was registered with ``flwr supernode register``; each SuperNode signs its requests with
its private key, ``--auth-supernode-private-key``). This module writes what that needs, with
the ``cryptography`` package Flower depends on: a self-signed CA, a server certificate for
127.0.0.1 (and ``localhost``) signed by it, and one EC P-384 key pair per SuperNode in
OpenSSH format (what ``ssh-keygen -t ecdsa -b 384`` writes).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 30


@dataclass(frozen=True)
class Certificates:
    """TLS files of the SuperLink: the CA certificate everyone trusts, and its own pair."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class NodeKey:
    """A SuperNode's authentication key pair (OpenSSH format)."""

    private: Path
    public: Path


def _write_private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    os.chmod(path, 0o600)
    return path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def write_certificates(folder: Path, host: str = "127.0.0.1") -> Certificates:
    """A CA and a server certificate for ``host`` (an IP address) and localhost."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = _name("fedrec deploy-local CA")
    ca_cert = (
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
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.crt").write_bytes(ca_cert.public_bytes(pem))
    (folder / "server.pem").write_bytes(server_cert.public_bytes(pem))
    key_bytes = server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _write_private(folder / "server.key", key_bytes)
    return Certificates(folder / "ca.crt", folder / "server.pem", folder / "server.key")


def write_node_key(folder: Path, name: str) -> NodeKey:
    """An EC P-384 key pair for one SuperNode: ``<name>`` (private) and ``<name>.pub``."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    _write_private(folder / name, private)
    (folder / f"{name}.pub").write_bytes(public + f" {name}\n".encode())
    return NodeKey(folder / name, folder / f"{name}.pub")
