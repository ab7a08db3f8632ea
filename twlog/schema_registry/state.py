# -*- test-case-name: tests.schema_registry.test_state -*-
"""The registry's content as a pure state machine over the records of the topic C{twlog-schemas}.

Every change is one JSON record; L{RegistryState.apply} is deterministic, so every registry
process that reads the topic in order holds the same content.  A record that conflicts with what
came before it in the topic (a schema id already bound to another schema, a version number
already taken) is refused by C{apply}, in every process alike: that is how two registry processes
agree on ids (the first record in the topic wins; the writer of the refused one sees it refused
when it reads its own record back, and tries again).

A schema's identity is its canonical text (L{twlog.avro.schema.canonical_text}: the same for any whitespace,
key order or long form of a primitive) with its C{metadata} and C{ruleSet}, stored and answered as Confluent
does (the registry runs no rule: clients do).  Records written before identity was canonical may give one
schema two ids: a replay maps the later id onto the first (it still answers, as that schema) and says so.
A permanent delete of the last version holding an id removes the id from every lookup.

Records:
  - C{{"op": "register", "subject": S, "version": V, "id": N, "schema": TEXT, "references": [...], "metadata": {...},
    "ruleSet": {...}}} (the last three only when given; TEXT as Confluent returns it, L{AvroSchema.confluent})
  - C{{"op": "delete", "subject": S, "version": V or null (every version), "permanent": bool}}
  - C{{"op": "config", "subject": S or null (global), "compatibility": LEVEL or null (remove)}}
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from twlog.avro.schema import COMPATIBILITY_LEVELS, DEFAULT_COMPATIBILITY, AvroSchema, InvalidSchema, incompatibilities
from twlog.schema_registry import errors, rules

#: The largest version number and schema id (Confluent's: a Java int).
MAX_INT = 2**31 - 1
#: What a registration may carry besides the schema, stored and answered with it (Confluent's schema references
#: and data contracts): C{references} is a list, the others JSON objects.
EXTRAS = ("references", "metadata", "ruleSet")


def identity(text: str, extras: dict) -> str:
    """What makes two registrations one schema: the canonical text, and the metadata and rules given with it."""
    if not extras:
        return text
    return text + "\n" + json.dumps(extras, separators=(",", ":"), sort_keys=True)


@attrs.define
class Version:
    """One version of a subject: its schema id, and whether it is soft-deleted."""

    version: int
    schema_id: int
    deleted: bool = False


class RegistryState:
    """Schemas by id, subjects' versions, compatibility levels; C{apply} a record, or plan one."""

    def __init__(self) -> None:
        #: The ids served, as canonical text (an id leaves when a permanent delete removes its last version).
        self.schemas: dict[int, str] = {}
        #: The metadata and ruleSet registered with an id, when there were any.
        self.extras: dict[int, dict] = {}
        #: Each schema's first id, by L{identity} (kept after a permanent delete: registered again, it gets it back).
        self.ids: dict[str, int] = {}
        #: Every id ever given, by L{identity}: an id never changes meaning.
        self.known: dict[int, str] = {}
        #: Ids of records written before identity was canonical, onto the first id of the same schema.
        self.aliases: dict[int, int] = {}
        #: Such ids found by L{apply} and not yet reported: C{(id, first id)}.
        self.merged: list[tuple[int, int]] = []
        #: How many versions (soft-deleted ones too) hold each served id.
        self.holders: dict[int, int] = {}
        self.top_id = 0
        self.subjects: dict[str, dict[int, Version]] = {}
        self.global_level = DEFAULT_COMPATIBILITY
        self.levels: dict[str, str] = {}
        self._parsed: dict[int, AvroSchema] = {}

    # -- applying records -------------------------------------------------------------

    def apply(self, record: Any) -> bool:
        """Apply one record of the topic; False (nothing changed) if it is malformed or conflicts."""
        if not isinstance(record, dict):
            return False
        op = record.get("op")
        try:
            if op == "register":
                return self._apply_register(record)
            if op == "delete":
                return self._apply_delete(record)
            if op == "config":
                return self._apply_config(record)
        except (KeyError, TypeError, ValueError):
            return False
        return False

    def _apply_register(self, record: dict) -> bool:
        subject, version, schema_id, text = record["subject"], record["version"], record["id"], record["schema"]
        extras = {key: record[key] for key in EXTRAS if record.get(key) not in (None, {}, [])}
        if not (isinstance(subject, str) and isinstance(text, str) and type(version) is int
                and type(schema_id) is int and 1 <= schema_id <= MAX_INT
                and all(isinstance(value, list if key == "references" else dict) for key, value in extras.items())):
            return False
        if version != self.next_version(subject):
            return False
        try:
            schema = self.parse(text, extras.get("references", []))
        except errors.RestError:
            return False
        key = identity(schema.text, extras)
        if self.known.get(schema_id, key) != key:
            return False  # the id is another schema's: a conflicting writer's
        first = self.ids.setdefault(key, schema_id)
        if first != schema_id and schema_id not in self.known:
            self.aliases[schema_id] = first  # (written before identity was canonical)
            self.merged.append((schema_id, first))
        self.known[schema_id] = key
        self.top_id = max(self.top_id, schema_id)
        self.schemas[first] = schema.confluent
        self._parsed[first] = schema
        if extras:
            self.extras[first] = extras
        self.holders[first] = self.holders.get(first, 0) + 1
        self.subjects.setdefault(subject, {})[version] = Version(version, first)
        return True

    def _apply_delete(self, record: dict) -> bool:
        subject, version, permanent = record["subject"], record.get("version"), bool(record.get("permanent"))
        versions = self.subjects.get(subject)
        if not versions:
            return False
        chosen = list(versions.values()) if version is None else [versions[version]] if version in versions else []
        if not chosen or any(rules.referenced_by(self, subject, e.version, permanent) for e in chosen):
            return False  # (a version another registry process's record made referenced meanwhile)
        for entry in chosen:
            if permanent:
                del versions[entry.version]
                self._release(entry.schema_id)
            else:
                entry.deleted = True
        if not versions:
            del self.subjects[subject]
            self.levels.pop(subject, None)
        return True

    def _release(self, schema_id: int) -> None:
        """A version holding C{schema_id} is gone for good: the id too, if it was the last."""
        self.holders[schema_id] -= 1
        if not self.holders[schema_id]:
            for table in (self.holders, self.schemas, self.extras, self._parsed):
                table.pop(schema_id, None)

    def _apply_config(self, record: dict) -> bool:
        subject, level = record.get("subject"), record.get("compatibility")
        if level is not None and level not in COMPATIBILITY_LEVELS:
            return False
        if subject is None:
            if level is None:
                return False
            self.global_level = level
        elif level is None:
            self.levels.pop(subject, None)
        else:
            self.levels[subject] = level
        return True

    # -- reading -------------------------------------------------------------------------

    def parse(self, text: str, references: list[dict]) -> AvroSchema:
        """C{text} parsed, the named types of the subject versions C{references} names at hand.

        @raise RestError: 42201 (invalid, or a reference to no version).
        """
        try:
            return AvroSchema.parse(text, rules.resolve(self, references))
        except InvalidSchema as e:
            raise errors.invalid_schema(str(e)) from None

    def next_version(self, subject: str) -> int:
        return max(self.subjects.get(subject, {}), default=0) + 1

    def next_id(self) -> int:
        return self.top_id + 1

    def served(self, schema_id: int) -> int:
        """The id C{schema_id} is served as (itself, or the first id of its schema).

        @raise RestError: 40403, no such id (or it was deleted permanently).
        """
        first = self.aliases.get(schema_id, schema_id)
        if first not in self.schemas:
            raise errors.schema_not_found(schema_id)
        return first

    def schema(self, schema_id: int) -> str:
        """@raise RestError: 40403."""
        return self.schemas[self.served(schema_id)]

    def schema_body(self, schema_id: int) -> dict:
        """C{GET /schemas/ids/N}: the schema, with its metadata and ruleSet when it has them."""
        first = self.served(schema_id)
        return {"schema": self.schemas[first], **self.extras.get(first, {})}

    def parsed(self, schema_id: int) -> AvroSchema:
        return self._parsed[self.served(schema_id)]

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, versions in self.subjects.items()
                      if any(deleted or not v.deleted for v in versions.values()))

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first (soft-deleted ones only if C{deleted}).

        @raise RestError: 40401, the subject has none.
        """
        found = [v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted]
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def version(self, subject: str, version: int | None, deleted: bool = False) -> Version:
        """Version C{version} of the subject, or its latest (None).

        @raise RestError: 40401 (no such subject), 40402 (no such version).
        """
        live = self.versions(subject, deleted=deleted)
        if version is None:
            return live[-1]
        for entry in live:
            if entry.version == version:
                return entry
        raise errors.version_not_found(version)

    def level(self, subject: str | None) -> str:
        return self.levels.get(subject, self.global_level) if subject is not None else self.global_level

    def describe(self, subject: str, entry: Version) -> dict:
        """The JSON of one subject version, as Confluent answers it."""
        return {"subject": subject, "version": entry.version, "id": entry.schema_id,
                "schema": self.schemas[entry.schema_id], **self.extras.get(entry.schema_id, {})}

    def lookup(self, subject: str, schema: AvroSchema, extras: dict | None = None, deleted: bool = False) -> Version:
        """The subject's latest version holding C{schema} (with C{extras}, when given).

        @raise RestError: 40401 (no such subject), 40403 (not under it).
        """
        for entry in reversed(self.versions(subject, deleted=deleted)):
            if self._matches(entry, schema, extras):
                return entry
        raise errors.schema_not_found()

    def _matches(self, entry: Version, schema: AvroSchema, extras: dict | None) -> bool:
        """Whether C{entry} holds C{schema}: with C{extras} when given (Confluent inherits them when not)."""
        return self._parsed[entry.schema_id].text == schema.text and (
            not extras or all(self.extras.get(entry.schema_id, {}).get(key) == value for key, value in extras.items()))

    def problems(self, subject: str, schema: AvroSchema, against: list[Version] | None = None) -> list[str]:
        """Why C{schema} may not be registered under C{subject} at its compatibility level (empty: it may)."""
        previous = against if against is not None else self.subjects_versions(subject)
        return incompatibilities(self.level(subject), schema, [self.parsed(v.schema_id) for v in previous])

    def subjects_versions(self, subject: str) -> list[Version]:
        return [v for _, v in sorted(self.subjects.get(subject, {}).items()) if not v.deleted]

    # -- planning changes ----------------------------------------------------------------------

    def plan_register(self, subject: str, schema: AvroSchema, extras: dict | None = None) -> tuple[int, dict | None]:
        """The id C{schema} has under C{subject}, and the record to append (None: registered already).

        Without metadata and ruleSet, a new version takes the latest version's, as Confluent's does.

        @raise RestError: 409 (incompatible at the subject's level).
        """
        live = self.subjects_versions(subject)
        for entry in reversed(live):
            if self._matches(entry, schema, extras):
                return entry.schema_id, None
        problems = self.problems(subject, schema)
        if problems:
            raise errors.incompatible(subject, problems)
        extras = dict(extras or {})
        if not (set(extras) & {"metadata", "ruleSet"}) and live:
            inherited = self.extras.get(live[-1].schema_id, {})
            extras.update({key: inherited[key] for key in ("metadata", "ruleSet") if key in inherited})
        schema_id = self.ids.get(identity(schema.text, extras)) or self.next_id()
        record = {"op": "register", "subject": subject, "version": self.next_version(subject), "id": schema_id,
                  "schema": schema.confluent, **extras}
        return schema_id, record
