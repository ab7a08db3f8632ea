# -*- test-case-name: tests.avro.test_schema -*-
"""Avro schemas: parsing (with the avro package's checks), one text per schema, and compatibility.

Compatibility is the avro package's C{ReaderWriterCompatibilityChecker}: Avro's own schema
resolution rules (a reader field missing from the writer needs a default, promotions such as int
to long, enum symbols, union branches...), the rules Confluent's registry applies through Avro's
Java C{SchemaCompatibility}.  Encoding and decoding use fastavro, whose parsed form each
L{AvroSchema} also carries.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs
import avro.errors
import avro.name
import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from twlog.avro.javatext import java_text

#: Confluent's compatibility levels.  C{_TRANSITIVE}: against every earlier version, not only the latest.
COMPATIBILITY_LEVELS = (
    "NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE",
)
DEFAULT_COMPATIBILITY = "BACKWARD"


class InvalidSchema(ValueError):
    """Text that is not a valid Avro schema: not JSON, or JSON that Avro refuses."""


@attrs.frozen(eq=False)
class AvroSchema:
    """One parsed schema: its canonical text (the registry's identity of a schema) and parsed forms."""

    #: The schema as the avro package writes it back (L{canonical_text}): one text for every way of writing it.
    text: str
    #: The avro package's schema (compatibility checks).
    avro: avro.schema.Schema = attrs.field(repr=False)
    #: fastavro's parsed schema (encoding and decoding).
    fast: Any = attrs.field(repr=False)
    #: The schema as Confluent's registry returns it (Java Avro's C{Schema.toString()}, L{java_text}).
    confluent: str = ""
    #: The full names of the named types it defines (what a schema referencing it may use).
    defines: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str | dict | list, references: Sequence[str] = ()) -> AvroSchema:
        """Parse C{text} (JSON text, or its decoded value), whose named types may be those of the schemas
        C{references} (texts, each after the ones it uses: Confluent's schema references, resolved).

        @raise InvalidSchema: naming what is wrong.
        """
        value = _json(text)
        names = avro.name.Names(validate_names=True)
        named: dict = {}
        try:
            for reference in references:
                referenced = _json(reference)
                avro.schema.make_avsc_object(referenced, names)
                fastavro.parse_schema(referenced, named, _write_hint=False)
            known = set(names.names)
            parsed = avro.schema.make_avsc_object(value, names)
            fast = fastavro.parse_schema(value, dict(named), expand=bool(references), _write_hint=False)
        except (avro.errors.AvroException, fastavro.schema.SchemaParseException, ValueError, TypeError,
                KeyError, AttributeError) as e:
            raise InvalidSchema(f"invalid Avro schema: {e}") from None
        defines = frozenset(set(names.names) - known)
        return cls(canonical_text(parsed, known), parsed, fast, java_text(parsed, known), defines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AvroSchema) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _json(text: str | dict | list) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError as e:
        # A bare name such as string is a schema in Avro's JSON only as "string".
        raise InvalidSchema(f"the schema is not JSON: {e}") from None


def canonical_text(parsed: avro.schema.Schema, known: set[str] | None = None) -> str:
    """The schema as the avro package writes it back (C{to_json}: a primitive's short form, nested named types by
    name), compact, keys sorted: the same text for any whitespace, key order or long form of a primitive.

    Avro's Parsing Canonical Form (C{to_canonical_json}) is the same normalisation but drops C{doc}, C{default},
    C{aliases}, C{logicalType} and custom attributes; Confluent's registry keeps them (its canonical string is
    Java's C{Schema.toString()}), and so does this: a default decides compatibility, and two schemas that differ
    in one are two schemas, with two ids.  The named types C{known} (of referenced schemas) are written by name.
    """
    names = avro.name.Names(validate_names=True)
    names.names.update(dict.fromkeys(known or ()))
    return json.dumps(parsed.to_json(names), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def can_read(reader: AvroSchema, writer: AvroSchema) -> list[str]:
    """Why data written with C{writer} cannot be read with C{reader} (Avro resolution): empty if it can."""
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader.avro, writer.avro)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = ", ".join(kind.value for kind in result.incompatibilities)
    where = ", ".join(sorted(result.locations))
    return [f"{kinds} at {where} ({', '.join(sorted(map(str, result.messages)))})"]


def incompatibilities(level: str, new: AvroSchema, previous: Sequence[AvroSchema]) -> list[str]:
    """Why C{new} may not follow C{previous} (oldest first) under the compatibility C{level}: empty if it may.

    BACKWARD: C{new} reads data written with the latest; FORWARD: the latest reads data written with
    C{new}; FULL: both; the C{_TRANSITIVE} forms check every earlier version; NONE: nothing.
    """
    if level not in COMPATIBILITY_LEVELS:
        raise ValueError(f"compatibility must be one of {', '.join(COMPATIBILITY_LEVELS)}, not {level!r}")
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems = []
    for index, old in enumerate(against):
        label = "the latest version" if len(against) == 1 else f"version {len(previous) - len(against) + index + 1}"
        if base in ("BACKWARD", "FULL"):
            problems += [f"cannot read {label}: {why}" for why in can_read(new, old)]
        if base in ("FORWARD", "FULL"):
            problems += [f"{label} cannot read it: {why}" for why in can_read(old, new)]
    return problems
