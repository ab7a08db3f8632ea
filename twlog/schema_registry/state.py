# -*- test-case-name: tests.schema_registry.test_state -*-
"""The registry's content as a pure state machine over the records of the topic C{twlog-schemas}.

Every change is one JSON record; L{RegistryState.apply} is deterministic, so every registry
process that reads the topic in order holds the same content.  A record that conflicts with what
came before it in the topic (a schema id already bound to another schema, a version number
already taken) is refused by C{apply}, in every process alike: that is how two registry processes
agree on ids (the first record in the topic wins; the writer of the refused one sees it refused
when it reads its own record back, and tries again).

Records:
  - C{{"op": "register", "subject": S, "version": V, "id": N, "schema": TEXT}}
  - C{{"op": "delete", "subject": S, "version": V or null (every version), "permanent": bool}}
  - C{{"op": "config", "subject": S or null (global), "compatibility": LEVEL or null (remove)}}
"""

from __future__ import annotations

from typing import Any

import attrs

from twlog.avro.schema import COMPATIBILITY_LEVELS, DEFAULT_COMPATIBILITY, AvroSchema, InvalidSchema, incompatibilities
from twlog.schema_registry import errors

#: The largest version number and schema id (Confluent's: a Java int).
MAX_INT = 2**31 - 1


@attrs.define
class Version:
    """One version of a subject: its schema id, and whether it is soft-deleted."""

    version: int
    schema_id: int
    deleted: bool = False


class RegistryState:
    """Schemas by id, subjects' versions, compatibility levels; C{apply} a record, or plan one."""

    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.ids: dict[str, int] = {}
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
        if not (isinstance(subject, str) and isinstance(text, str) and type(version) is int
                and type(schema_id) is int and 1 <= schema_id <= MAX_INT):
            return False
        if self.schemas.get(schema_id, text) != text or self.ids.get(text, schema_id) != schema_id:
            return False  # the id is another schema's, or the schema has another id: a conflicting writer's
        if version != self.next_version(subject):
            return False
        if schema_id not in self._parsed:
            try:
                self._parsed[schema_id] = AvroSchema.parse(text)
            except InvalidSchema:
                return False
        self.schemas[schema_id] = text
        self.ids[text] = schema_id
        self.subjects.setdefault(subject, {})[version] = Version(version, schema_id)
        return True

    def _apply_delete(self, record: dict) -> bool:
        subject, version, permanent = record["subject"], record.get("version"), bool(record.get("permanent"))
        versions = self.subjects.get(subject)
        if not versions:
            return False
        chosen = list(versions.values()) if version is None else [versions[version]] if version in versions else []
        if not chosen:
            return False
        for entry in chosen:
            if permanent:
                del versions[entry.version]
            else:
                entry.deleted = True
        if not versions:
            del self.subjects[subject]
            self.levels.pop(subject, None)
        return True

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

    def next_version(self, subject: str) -> int:
        return max(self.subjects.get(subject, {}), default=0) + 1

    def next_id(self) -> int:
        return max(self.schemas, default=0) + 1

    def schema(self, schema_id: int) -> str:
        """@raise RestError: 40403."""
        if schema_id not in self.schemas:
            raise errors.schema_not_found(schema_id)
        return self.schemas[schema_id]

    def parsed(self, schema_id: int) -> AvroSchema:
        if schema_id not in self._parsed:
            self._parsed[schema_id] = AvroSchema.parse(self.schema(schema_id))
        return self._parsed[schema_id]

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

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        """Every live (subject, version) registered as C{schema_id}."""
        self.schema(schema_id)
        return sorted((subject, v.version) for subject, versions in self.subjects.items()
                      for v in versions.values() if v.schema_id == schema_id and not v.deleted)

    def level(self, subject: str | None) -> str:
        return self.levels.get(subject, self.global_level) if subject is not None else self.global_level

    def describe(self, subject: str, entry: Version) -> dict:
        """The JSON of one subject version, as Confluent answers it."""
        return {"subject": subject, "version": entry.version, "id": entry.schema_id,
                "schema": self.schemas[entry.schema_id]}

    def lookup(self, subject: str, schema: AvroSchema, deleted: bool = False) -> Version:
        """The subject's version holding C{schema}.

        @raise RestError: 40401 (no such subject), 40403 (not under it).
        """
        schema_id = self.ids.get(schema.text)
        for entry in reversed(self.versions(subject, deleted=deleted)):
            if entry.schema_id == schema_id:
                return entry
        raise errors.schema_not_found()

    def problems(self, subject: str, schema: AvroSchema, against: list[Version] | None = None) -> list[str]:
        """Why C{schema} may not be registered under C{subject} at its compatibility level (empty: it may)."""
        previous = against if against is not None else self.subjects_versions(subject)
        return incompatibilities(self.level(subject), schema, [self.parsed(v.schema_id) for v in previous])

    def subjects_versions(self, subject: str) -> list[Version]:
        return [v for _, v in sorted(self.subjects.get(subject, {}).items()) if not v.deleted]

    # -- planning changes ----------------------------------------------------------------------

    def plan_register(self, subject: str, schema: AvroSchema) -> tuple[int, dict | None]:
        """The id C{schema} has under C{subject}, and the record to append (None: registered already).

        @raise RestError: 409 (incompatible at the subject's level).
        """
        for entry in self.subjects_versions(subject):
            if self.schemas[entry.schema_id] == schema.text:
                return entry.schema_id, None
        problems = self.problems(subject, schema)
        if problems:
            raise errors.incompatible(subject, problems)
        schema_id = self.ids.get(schema.text) or self.next_id()
        record = {"op": "register", "subject": subject, "version": self.next_version(subject), "id": schema_id,
                  "schema": schema.text}
        return schema_id, record
