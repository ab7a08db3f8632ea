# -*- test-case-name: tests.cli.test_local_secure,tests.integration.test_local_secure -*-
"""What C{twlog local --secure} makes before it starts a cluster: a CA, the brokers' certificate, and secrets.

Under C{<data>/secure} (mode 0700), made once and kept, so that a client set up
against one run keeps working after a restart:

  - C{ca.pem}, C{ca.key}: a CA made for this cluster alone (EC P-256), valid for
    a year; made again when it has expired or is about to;
  - C{broker.pem}, C{broker.key}: the brokers' certificate, signed by it, naming
    C{localhost} and C{127.0.0.1};
  - C{admin.password}: the password of the C{admin} user (a super user);
  - C{zookeeper.credentials}: the identity the brokers and admin commands use
    towards ZooKeeper.

Keys and passwords are files of mode 0600.  The certificates are made with
C{cryptography} (pyOpenSSL's own dependency): no cryptography is written here.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from twlog.coord.users import UserStore
from twlog.coord.zk import ZooKeeper
from twlog.coord.zkauth import read_credentials_file
from twlog.coord.zksecure import record_user_digest, set_group_acl
from twlog.security.credentials import SCRAM_MECHANISMS, make_credential

__all__ = ["ADMIN", "SecureFiles", "prepare_secure", "provision", "secure_broker_argv", "secure_usage_lines",
           "write_client_properties"]

#: The super user C{twlog local --secure} creates.
ADMIN = "admin"
#: The ZooKeeper identity of the brokers and the admin commands.
ZOOKEEPER_USER = "twlog-cluster"
#: How long the CA and the brokers' certificate are valid, and how close to the end they are made again.
VALID = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=7)


@attrs.frozen
class SecureFiles:
    """Where C{twlog local --secure}'s files are (L{prepare_secure})."""

    directory: str

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    @property
    def ca_file(self) -> str:
        return self.path("ca.pem")

    @property
    def broker_cert(self) -> str:
        return self.path("broker.pem")

    @property
    def broker_key(self) -> str:
        return self.path("broker.key")

    @property
    def admin_password_file(self) -> str:
        return self.path("admin.password")

    @property
    def zookeeper_credentials_file(self) -> str:
        return self.path("zookeeper.credentials")

    @property
    def admin_zookeeper_file(self) -> str:
        """The admin user's ZooKeeper credentials (a group member authenticates to ZooKeeper as its user)."""
        return self.path("admin-zookeeper.credentials")

    def admin_password(self) -> str:
        with open(self.admin_password_file, encoding="utf-8") as f:
            return f.read().strip()


def _write_secret(path: str, data: bytes) -> None:
    """Write C{path} readable by its owner alone (0600), whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def prepare_secure(data: str, now: datetime.datetime | None = None) -> SecureFiles:
    """Make (or keep) C{<data>/secure}'s CA, certificate and secrets; return where they are."""
    files = SecureFiles(os.path.join(data, "secure"))
    os.makedirs(files.directory, mode=0o700, exist_ok=True)
    os.chmod(files.directory, 0o700)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if not _still_valid(files.ca_file, now) or not _still_valid(files.broker_cert, now) \
            or not os.path.exists(files.broker_key) or not os.path.exists(files.path("ca.key")):
        _make_certificates(files, now)
    if not os.path.exists(files.admin_password_file):
        _write_secret(files.admin_password_file, secrets.token_urlsafe(24).encode("ascii") + b"\n")
    if not os.path.exists(files.zookeeper_credentials_file):
        password = secrets.token_urlsafe(24)
        _write_secret(files.zookeeper_credentials_file, f"{ZOOKEEPER_USER}:{password}\n".encode("ascii"))
    _write_secret(files.admin_zookeeper_file, f"{ADMIN}:{files.admin_password()}\n".encode("ascii"))
    return files


def _still_valid(path: str, now: datetime.datetime) -> bool:
    try:
        with open(path, "rb") as f:
            certificate = x509.load_pem_x509_certificate(f.read())
    except (OSError, ValueError):
        return False
    return certificate.not_valid_after_utc - RENEW_BEFORE > now


def _make_certificates(files: SecureFiles, now: datetime.datetime) -> None:
    def key_pem(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    start = now - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "twlog local"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"twlog local CA {now:%Y-%m-%d %H:%M:%S}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(now + VALID)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "twlog local"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
              .issuer_name(ca_name).public_key(broker_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(now + VALID)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                          x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                          x509.IPAddress(ipaddress.ip_address("::1"))]),
                             critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    _write_secret(files.path("ca.key"), key_pem(ca_key))
    _write(files.ca_file, ca.public_bytes(serialization.Encoding.PEM))
    _write_secret(files.broker_key, key_pem(broker_key))
    _write(files.broker_cert, broker.public_bytes(serialization.Encoding.PEM))


def write_client_properties(path: str, files: SecureFiles, bootstrap: list[str], mechanism: str) -> None:
    """Write the admin's client settings to C{path} (0600: it holds the password), with Kafka's key names."""
    lines = [
        "# twlog local --secure: the admin user's settings (a super user); keep this file private",
        f"bootstrap.servers={','.join(bootstrap)}",
        "security.protocol=SASL_SSL",
        f"ssl.ca.location={files.ca_file}",
        f"sasl.mechanism={mechanism}",
        f"sasl.username={ADMIN}",
        f"sasl.password={files.admin_password()}",
    ]
    _write_secret(path, ("\n".join(lines) + "\n").encode("utf-8"))


#: The SASL mechanisms the brokers serve, and the one the admin's settings name.
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
ADMIN_MECHANISM = "SCRAM-SHA-512"
#: The group the printed group-consumer example uses (its ZooKeeper nodes writable by the admin).
DEMO_GROUP = "demo"


def secure_broker_argv(files: SecureFiles, tls_port: int, metrics: bool) -> list[str]:
    """The options that secure one broker of C{twlog local --secure}: its TLS port, SASL required on both ports,
    ACLs with the admin a super user, the cluster's ZooKeeper identity, the admin as its identity towards the other
    brokers (replication), and HTTPS metrics."""
    argv = ["--tls-port", str(tls_port), "--tls-cert", files.broker_cert, "--tls-key", files.broker_key,
            "--sasl-mechanisms", ",".join(MECHANISMS), "--require-auth",
            "--acls", "--super-users", f"User:{ADMIN}",
            "--zookeeper-credentials-file", files.zookeeper_credentials_file,
            "--inter-broker-user", ADMIN, "--inter-broker-password-file", files.admin_password_file,
            "--inter-broker-mechanism", ADMIN_MECHANISM]
    if metrics:
        argv += ["--metrics-tls-cert", files.broker_cert, "--metrics-tls-key", files.broker_key]
    return argv


async def provision(reactor, hosts: str, files: SecureFiles) -> None:
    """Before the brokers start: the admin user (SCRAM credentials, and its ZooKeeper identity), and the demo
    group's ZooKeeper nodes writable by it, written as the cluster's ZooKeeper identity."""
    zk = ZooKeeper(hosts, reactor=reactor, connect_timeout_s=10.0,
                   credentials=read_credentials_file(files.zookeeper_credentials_file))
    await zk.start()
    try:
        password = files.admin_password()
        await UserStore(zk).add(ADMIN, {m: make_credential(m, password) for m in SCRAM_MECHANISMS})
        await record_user_digest(zk, ADMIN, password)
        await set_group_acl(zk, DEMO_GROUP, [f"User:{ADMIN}"])
    finally:
        await zk.stop()


def secure_usage_lines(zookeeper: str, data: str, files: SecureFiles, tls_addresses: list[str]) -> list[str]:
    """How to use a secured local cluster (C{data}: the --data directory as the user gave it)."""
    config = os.path.join(data, "client.properties")
    cluster_zk = (f"--zookeeper {zookeeper} --zookeeper-credentials-file "
                  f"{os.path.join(data, 'secure', 'zookeeper.credentials')}")
    admin_zk = (f"--zookeeper {zookeeper} --zookeeper-credentials-file "
                f"{os.path.join(data, 'secure', 'admin-zookeeper.credentials')}")
    return [
        f"secured: TLS at {','.join(tls_addresses)} (CA {files.ca_file}), SASL required on every port, ACLs on; "
        f"the super user {ADMIN}'s settings are in {config}",
        "",
        f"produce:  seq 1 100 | twlog produce --client-config {config} --topic clicks",
        f"consume:  twlog consume --client-config {config} --topic clicks",
        f"group:    twlog consume --client-config {config} {admin_zk} --group {DEMO_GROUP} --topic clicks",
        f"inspect:  twlog topics --client-config {config}",
        f"users:    twlog users add {cluster_zk} --user bob",
        f"acls:     twlog acls add {cluster_zk} --allow-principal User:bob --operation Read --topic clicks",
    ]
