# -*- test-case-name: tests.security.test_principals -*-
"""A mutual-TLS client's principal: C{User:<its certificate's subject DN>}, as Kafka names it (no I/O).

Kafka's default principal builder takes C{X500Principal.getName()}, the subject in RFC 2253 form: the
attributes from the most specific to the least (C{CN=client,OU=ops,O=example,C=FR}), with C{,}, C{+}, C{"},
C{\\}, C{<}, C{>}, C{;} escaped.  The C{cryptography} package's RFC 4514 string (RFC 2253's successor, the same
output for these) gives exactly that.
"""

from __future__ import annotations

from twlog.security import user_principal

__all__ = ["certificate_principal", "subject_dn"]


def subject_dn(certificate) -> str:
    """The subject of C{certificate} (pyOpenSSL's C{X509} or cryptography's C{Certificate}) in RFC 2253 form."""
    if hasattr(certificate, "to_cryptography"):
        certificate = certificate.to_cryptography()
    return certificate.subject.rfc4514_string()


def certificate_principal(certificate) -> str:
    """C{User:<subject DN>}: the principal of a client that presented C{certificate} (verified)."""
    return user_principal(subject_dn(certificate))
