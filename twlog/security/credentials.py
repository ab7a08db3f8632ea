# -*- test-case-name: tests.security.test_credentials -*-
"""SCRAM credentials in Kafka's format, and the one check of a PLAIN password against them (no I/O).

A user's credential for a SCRAM mechanism is what RFC 5802 lets a server keep instead of the password: a
salt, an iteration count, C{StoredKey = H(HMAC(SaltedPassword, "Client Key"))} and C{ServerKey =
HMAC(SaltedPassword, "Server Key")}, where C{SaltedPassword = PBKDF2(HMAC-H, password, salt, iterations)}.
Kafka writes it as C{salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>} (L{ScramCredential.text})
and keeps a user's in ZooKeeper at C{/config/users/<user>} as
C{{"version":1,"config":{"SCRAM-SHA-256":"salt=...","SCRAM-SHA-512":"..."}}} (L{user_config},
L{parse_user_config}).  scramp makes the keys (L{make_credential}); nothing here is hand-written crypto but
L{check_plain}, which derives the same keys with C{hashlib.pbkdf2_hmac} and compares them with
C{hmac.compare_digest}.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re

import attrs
from scramp import ScramMechanism
from scramp.utils import saslprep

from twlog.errors import TwlogError

__all__ = [
    "MAX_ITERATIONS", "MIN_ITERATIONS", "PLAIN", "SCRAM_MECHANISMS", "SASL_MECHANISMS", "InvalidCredential",
    "ScramCredential", "check_plain", "make_credential", "parse_user_config", "user_config", "validate_user_name",
]

#: The SCRAM mechanisms (RFC 7677, RFC 5802), by their SASL names, and their hashes.
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_MECHANISMS = tuple(SCRAM_HASHES)
PLAIN = "PLAIN"
#: Every SASL mechanism a broker may enable (Kafka's C{sasl.enabled.mechanisms} values twlog serves).
SASL_MECHANISMS = (*SCRAM_MECHANISMS, PLAIN)
#: Kafka's bounds on a SCRAM credential's iterations (C{ScramMechanism.minIterations}, C{maxIterations}).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384

_USER = re.compile(r"[A-Za-z0-9._@-]{1,255}")


class InvalidCredential(TwlogError):
    """A stored credential, or a user's record, is not in Kafka's format."""


def validate_user_name(name: str) -> str:
    """C{name} if it is a user name twlog stores (1 to 255 of C{A-Z a-z 0-9 . _ @ -}, not C{.} or C{..}).

    @raise TwlogError: naming what is wrong.
    """
    if not _USER.fullmatch(name) or name in (".", ".."):
        raise TwlogError(f"user name {name!r} is not 1 to 255 of A-Z a-z 0-9 . _ @ - (and not . or ..)")
    return name


@attrs.frozen
class ScramCredential:
    """One user's credential for one SCRAM mechanism, as RFC 5802 section 3 defines it."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def text(self) -> str:
        """Kafka's form: C{salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>}."""
        b64 = lambda value: base64.b64encode(value).decode("ascii")  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def parse(cls, text: str) -> ScramCredential:
        """The credential in Kafka's form C{text}.

        @raise InvalidCredential: a field is missing, repeated, not base64, or the iterations out of bounds.
        """
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep or key in fields:
                raise InvalidCredential(f"not a SCRAM credential (salt=,stored_key=,server_key=,iterations=): {part!r}")
            fields[key] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise InvalidCredential(f"a SCRAM credential has salt, stored_key, server_key and iterations, not "
                                    f"{', '.join(sorted(fields))}")
        try:
            decoded = {key: base64.b64decode(fields[key], validate=True)
                       for key in ("salt", "stored_key", "server_key")}
            iterations = int(fields["iterations"])
        except (binascii.Error, ValueError) as e:
            raise InvalidCredential(f"a SCRAM credential's field does not decode: {e}") from None
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise InvalidCredential(f"a SCRAM credential's iterations {iterations} are outside "
                                    f"[{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
        return cls(decoded["salt"], decoded["stored_key"], decoded["server_key"], iterations)


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """A new credential of C{password} for C{mechanism} (a random salt unless given), made by scramp.

    @raise TwlogError: an unknown mechanism, iterations out of bounds, or a password SASLprep refuses.
    """
    if mechanism not in SCRAM_HASHES:
        raise TwlogError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(SCRAM_MECHANISMS)})")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise TwlogError(f"iterations {iterations} are outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}] (Kafka's bounds)")
    try:
        made_salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations, salt=salt)
    except Exception as e:  # scramp's ScramException: a password SASLprep refuses (prohibited characters)
        raise TwlogError(f"cannot make a {mechanism} credential: {e.args[0] if e.args else e}") from None
    return ScramCredential(made_salt, stored_key, server_key, count)


def check_plain(credential: ScramCredential, mechanism: str, password: str) -> bool:
    """Whether C{password} is the one C{credential} (of SCRAM C{mechanism}) was made from (RFC 5802's formulas:
    the stored key of the salted password, compared in constant time)."""
    name = SCRAM_HASHES[mechanism]
    try:
        prepared = saslprep(password).encode("utf-8")
    except Exception:  # scramp's ScramException: prohibited characters, so never a stored password
        return False
    salted = hashlib.pbkdf2_hmac(name, prepared, credential.salt, credential.iterations)
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hmac.compare_digest(hashlib.new(name, client_key).digest(), credential.stored_key)


def user_config(credentials: dict[str, ScramCredential]) -> bytes:
    """The value of C{/config/users/<user>} holding C{credentials} (by mechanism), as Kafka writes it."""
    config = {mechanism: credentials[mechanism].text() for mechanism in sorted(credentials)}
    return json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode("utf-8")


def parse_user_config(value: bytes) -> dict[str, ScramCredential]:
    """The SCRAM credentials, by mechanism, in a C{/config/users/<user>} value (other keys are ignored).

    @raise InvalidCredential: not JSON of Kafka's shape, or a credential not in its format.
    """
    try:
        document = json.loads(value.decode("utf-8")) if value else {}
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidCredential(f"not JSON: {e}") from None
    config = document.get("config", {}) if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise InvalidCredential('not {"version":1,"config":{...}}')
    return {mechanism: ScramCredential.parse(str(text)) for mechanism, text in config.items()
            if mechanism in SCRAM_HASHES}
