# -*- test-case-name: tests.client.test_tls,tests.integration.test_tls -*-
"""L{TLSSettings}: how a client speaks TLS to a broker's TLS port (C{--tls-port}).

One frozen value, in L{twlog.client.options.ClientOptions.tls}: the CA file
that signs the brokers' certificates (None: the system's trust store), the
client's own certificate and key for mutual TLS, and whether the broker's
certificate must name the host connected to (on by default, as in Kafka's
C{ssl.endpoint.identification.algorithm=https}).  The Twisted
L{twlog.client.connection.BrokerConnection} gets its context from
L{TLSSettings.twisted_options} (Twisted's C{optionsForClientTLS}), the
blocking L{twlog.client.sync.SyncConnection} from L{TLSSettings.ssl_context}
(the standard library's C{ssl}).  No cryptography is done here: both load
files and hand them to OpenSSL.
"""

from __future__ import annotations

import re
import ssl

import attrs
from OpenSSL import SSL, crypto
from twisted.internet import ssl as tssl
from twisted.internet.error import VerifyError

from twlog.errors import TwlogError

__all__ = ["TLSSettings", "TLSSetupError", "describe_tls_failure", "load_private_certificate", "openssl_reason",
           "pem_certificates", "server_certificate_options"]

_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


class TLSSetupError(TwlogError):
    """A certificate, key or CA file that cannot be used (missing, unreadable, not PEM, key not matching)."""


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TLSSetupError(f"cannot read the {what} {path}: {e.strerror or e}") from None


def pem_certificates(path: str, what: str) -> list[bytes]:
    """The PEM certificates in the file C{path}, in order.

    @raise TLSSetupError: the file cannot be read or holds no PEM certificate.
    """
    found = _PEM_CERTIFICATE.findall(_read(path, what))
    if not found:
        raise TLSSetupError(f"the {what} {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return found


def load_private_certificate(cert_file: str, key_file: str, what: str):
    """A Twisted C{PrivateCertificate} of the first certificate of C{cert_file} and the key of C{key_file}, and
    the further certificates of C{cert_file} (its chain)."""
    chain = pem_certificates(cert_file, f"{what} certificate")
    key = _read(key_file, f"{what} key")
    if b"PRIVATE KEY-----" not in key:
        raise TLSSetupError(f"the {what} key {key_file} holds no PEM private key (-----BEGIN PRIVATE KEY-----)")
    try:
        private = tssl.PrivateCertificate.loadPEM(chain[0] + b"\n" + key)
    except (SSL.Error, crypto.Error, VerifyError, ValueError) as e:
        raise TLSSetupError(f"cannot load the {what} certificate {cert_file} with the key {key_file}: "
                            f"{openssl_reason(e)}") from None
    extra = [tssl.Certificate.loadPEM(pem).original for pem in chain[1:]]
    return private, extra


def server_certificate_options(cert_file: str, key_file: str, client_ca_file: str | None, *, what: str,
                               options: tuple[str, str, str] = ("--tls-cert", "--tls-key", "--tls-client-ca")):
    """Twisted's server C{CertificateOptions}: the certificate of C{cert_file} (and the chain after it) with the key
    of C{key_file}, TLS 1.2 at least, and with C{client_ca_file} a client certificate required and verified against
    its CAs (mutual TLS).  The broker's TLS port, its metrics and the schema registry serve with it.

    @param what: whose certificate, for the errors (C{"broker's --tls-cert"}).
    @param options: the names of the certificate, key and client CA options, for the errors.
    @raise TLSSetupError: a file cannot be read or used (one line naming it).
    """
    cert_option, key_option, ca_option = options
    private, chain = load_private_certificate(cert_file, key_file, what)
    verify = {}
    if client_ca_file is not None:
        pems = pem_certificates(client_ca_file, f"{ca_option} file")
        try:
            authorities = [tssl.Certificate.loadPEM(pem).original for pem in pems]
        except (SSL.Error, crypto.Error, ValueError) as e:
            raise TLSSetupError(f"cannot load {ca_option} {client_ca_file}: {openssl_reason(e)}") from None
        verify = {"verify": True, "caCerts": authorities, "requireCertificate": True}
    try:
        return tssl.CertificateOptions(
            privateKey=private.privateKey.original, certificate=private.original, extraCertChain=chain or None,
            raiseMinimumTo=tssl.TLSVersion.TLSv1_2, **verify,
        )
    except (SSL.Error, crypto.Error, VerifyError, ValueError) as e:
        raise TLSSetupError(f"cannot use {cert_option} {cert_file} with {key_option} {key_file}: "
                            f"{openssl_reason(e)}") from None


def openssl_reason(e: BaseException) -> str:
    """One line of an OpenSSL error (its reasons), else of the exception."""
    args = getattr(e, "args", ())
    if args and isinstance(args[0], list) and args[0] and isinstance(args[0][0], tuple):
        return "; ".join(str(part[-1]) for part in args[0])
    return str(e) or type(e).__name__


#: What a TLS failure's OpenSSL reason most likely means, for the one line a client prints.
_MEANINGS = (
    ("wrong version number", "the port does not speak TLS: TLS goes to a broker's --tls-port"),
    ("certificate required", "the broker requires a client certificate: --tls-cert and --tls-key"),
    ("unknown ca", "the broker does not trust this client's certificate"),
    ("bad certificate", "the broker refused this client's certificate"),
    ("mismatch", "the broker's certificate does not name the host connected to"),
    ("doesn't match", "the broker's certificate does not name the host connected to"),
    ("verificationerror", "the broker's certificate does not name the host connected to"),
    ("certificate verify failed", "the broker's certificate is not signed by a CA of --tls-ca, or has expired"),
)


def describe_tls_failure(text: str) -> str:
    """C{text} (an OpenSSL error, as Twisted or the standard library word it) as one line: its reasons, and what
    they most likely mean."""
    if text.startswith("[(") and "'" in text:  # pyOpenSSL's [('SSL routines', '', 'reason'), ...]
        text = "; ".join(part.strip(" '\"") for part in re.findall(r", '([^']*)'\)", text)) or text
    text = " ".join(text.split()).rstrip(".")
    lowered = text.lower().replace("_", " ")
    for needle, meaning in _MEANINGS:
        if needle in lowered:
            return f"TLS failed: {text} ({meaning})"
    return f"TLS failed: {text}"


@attrs.frozen
class TLSSettings:
    """A client's TLS: whom it trusts, who it is, and whether it checks the broker's name.

    @ivar ca_file: PEM file of the CAs that sign the brokers' certificates (None: the system's trust store).
    @ivar cert_file: PEM file of this client's certificate (mutual TLS), with C{key_file}.
    @ivar key_file: PEM file of that certificate's private key.
    @ivar check_hostname: whether the broker's certificate must name the host (or IP address) connected to.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True

    def __attrs_post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise TLSSetupError("a client certificate needs its key, and a key its certificate "
                                "(--tls-cert and --tls-key together)")

    def twisted_options(self, host: str):
        """Twisted's client TLS options (C{IOpenSSLClientConnectionCreator}) for a broker reached as C{host}.

        @raise TLSSetupError: a file cannot be used.
        """
        if self.ca_file is None:
            trust = tssl.platformTrust()
        else:
            trust = tssl.trustRootFromCertificates(
                [tssl.Certificate.loadPEM(pem) for pem in pem_certificates(self.ca_file, "CA file")])
        client = None
        extra: list = []
        if self.cert_file is not None and self.key_file is not None:
            client, extra = load_private_certificate(self.cert_file, self.key_file, "client")
        if self.check_hostname:
            return tssl.optionsForClientTLS(host, trustRoot=trust, clientCertificate=client,
                                            extraCertificateOptions={"extraCertChain": extra} if extra else None)
        return tssl.CertificateOptions(
            privateKey=client.privateKey.original if client else None,
            certificate=client.original if client else None, extraCertChain=extra or None,
            trustRoot=trust, raiseMinimumTo=tssl.TLSVersion.TLSv1_2,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The standard library's client context for these settings (the blocking client's).

        @raise TLSSetupError: a file cannot be used.
        """
        if self.ca_file is not None:
            pem_certificates(self.ca_file, "CA file")  # (a clear error for a missing or non-PEM file)
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.cert_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as e:
            raise TLSSetupError(f"cannot load the client's TLS files: {e}") from None
        context.check_hostname = self.check_hostname
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return context
