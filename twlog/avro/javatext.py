# -*- test-case-name: tests.avro.test_javatext -*-
"""A parsed schema written as Java Avro's C{Schema.toString()} writes it: the text Confluent's registry returns.

Confluent's registry stores and answers C{AvroSchema.canonicalString()}, which is Java Avro's
C{Schema.toString(referencedSchemas, false)}: compact JSON with each kind's attributes in a fixed order
(C{type}, C{name}, C{namespace}, C{doc}, then C{fields}, C{symbols}, C{size}, C{items} or C{values}, then the
custom properties in the order given, then C{aliases}), a namespace written only where it differs from the
enclosing record's, a named type written in full once and by name after that (and the named types of
referenced schemas by name only).  This walks the avro package's parsed schema (which did the parsing and
the normalisation) and writes its attributes in that order; C{tests/avro/test_javatext.py} compares it with
the texts Confluent documents.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import avro.schema

#: Attributes written in their own place (the rest of a schema's properties are custom, written after them).
_OWN = {"type", "name", "namespace", "doc", "fields", "symbols", "size", "items", "values", "aliases", "default",
        "order"}


def java_text(parsed: avro.schema.Schema, known: Iterable[str] = ()) -> str:
    """The schema as Java's C{Schema.toString()}; the named types C{known} (full names) are written by name."""
    return json.dumps(_Writer(set(known)).write(parsed, None), separators=(",", ":"), ensure_ascii=False)


def _qualified(fullname: str, space: str | None) -> str:
    """Java's C{Name.getQualified(space)}: the short name when the name is in C{space}."""
    name_space, _, short = fullname.rpartition(".")
    return short if (not name_space or name_space == space) else fullname


class _Writer:
    def __init__(self, known: set[str]) -> None:
        self.known = known

    def write(self, schema: avro.schema.Schema, space: str | None) -> Any:
        if isinstance(schema, avro.schema.NamedSchema):
            return self._named(schema, space)
        if isinstance(schema, avro.schema.UnionSchema):
            return [self.write(branch, space) for branch in schema.schemas]
        out: dict[str, Any] = {"type": schema.type}
        if isinstance(schema, avro.schema.ArraySchema):
            out["items"] = self.write(schema.items, space)
        elif isinstance(schema, avro.schema.MapSchema):
            out["values"] = self.write(schema.values, space)
        props = self._props(schema)
        if len(out) == 1 and not props:
            return schema.type  # (a primitive without properties: its short form)
        return {**out, **props}

    @staticmethod
    def _props(schema) -> dict:
        return {key: value for key, value in schema.props.items() if key not in _OWN}

    def _named(self, schema: avro.schema.NamedSchema, space: str | None) -> Any:
        fullname = schema.fullname
        if fullname in self.known:
            return _qualified(fullname, space)
        self.known.add(fullname)
        own_space = schema.namespace or None
        out: dict[str, Any] = {"type": schema.type, "name": schema.name}
        if own_space is not None and own_space != space:
            out["namespace"] = own_space
        elif own_space is None and space is not None:
            out["namespace"] = ""
        if schema.props.get("doc") is not None:
            out["doc"] = schema.props["doc"]
        if isinstance(schema, avro.schema.RecordSchema):
            out["fields"] = [self._field(field, own_space) for field in schema.fields]
        elif isinstance(schema, avro.schema.EnumSchema):
            out["symbols"] = list(schema.symbols)
            if schema.props.get("default") is not None:
                out["default"] = schema.props["default"]
        elif isinstance(schema, avro.schema.FixedSchema):
            out["size"] = schema.size
        out.update(self._props(schema))
        aliases = schema.props.get("aliases")
        if aliases:
            out["aliases"] = [_qualified(a if "." in a or own_space is None else f"{own_space}.{a}", own_space)
                              for a in aliases]
        return out

    def _field(self, field: avro.schema.Field, space: str | None) -> dict:
        out: dict[str, Any] = {"name": field.name, "type": self.write(field.type, space)}
        if field.doc is not None:
            out["doc"] = field.doc
        if field.has_default:
            out["default"] = field.default
        if field.order not in (None, "ascending"):
            out["order"] = field.order
        aliases = field.props.get("aliases")
        if aliases:
            out["aliases"] = list(aliases)
        out.update(self._props(field))
        return out
