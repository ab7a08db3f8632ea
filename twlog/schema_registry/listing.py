# -*- test-case-name: tests.schema_registry.test_listing -*-
"""The registry's listings and their query parameters, as Confluent's C{SubjectsResource},
C{SubjectVersionsResource} and C{SchemasResource} answer them.

C{subjectPrefix} keeps the subjects starting with it; C{deleted} takes soft-deleted versions too,
C{deletedOnly} only them (it wins over C{deleted}), C{deletedAsNegative} lists them as negative
numbers; C{latestOnly} keeps each subject's latest version; C{offset} skips, C{limit} cuts (a limit
of 0 or less, or above the maximum, is the default: C{GET /schemas} 1000, the other two unlimited).
A number that is not one answers 404, as JAX-RS does for a query parameter it cannot convert.
"""

from __future__ import annotations

import attrs

from twlog.schema_registry import errors
from twlog.schema_registry.errors import RestError
from twlog.schema_registry.state import RegistryState, Version

#: C{GET /schemas}: Confluent's C{schema.search.default.limit} and C{schema.search.max.limit}.
SCHEMAS_LIMIT = 1000


def flag(args: dict, name: str) -> bool:
    """A boolean query parameter, as JAX-RS reads one: C{true} in any case, else false."""
    values = args.get(name.encode(), [])
    return bool(values) and values[-1].decode(errors="replace").lower() == "true"


def _number(args: dict, name: str, default: int) -> int:
    values = args.get(name.encode(), [])
    if not values:
        return default
    try:
        return int(values[-1].decode(errors="replace"))
    except ValueError:
        raise RestError(404, 404, "HTTP 404 Not Found") from None


@attrs.frozen
class Listing:
    """One listing request's parameters."""

    prefix: str = ""
    deleted: bool = False
    deleted_only: bool = False
    as_negative: bool = False
    latest_only: bool = False
    offset: int = 0
    limit: int = -1

    @classmethod
    def of(cls, args: dict) -> Listing:
        values = args.get(b"subjectPrefix", [])
        prefix = values[-1].decode(errors="replace") if values else ""
        return cls(prefix=prefix, deleted=flag(args, "deleted"), deleted_only=flag(args, "deletedOnly"),
                   as_negative=flag(args, "deletedAsNegative"), latest_only=flag(args, "latestOnly"),
                   offset=_number(args, "offset", 0), limit=_number(args, "limit", -1))

    def keeps(self, entry: Version) -> bool:
        """Whether a version passes the deleted filters."""
        if self.deleted_only and not self.as_negative:
            return entry.deleted
        return self.deleted or self.as_negative or not entry.deleted

    def page(self, items: list, maximum: int | None = None) -> list:
        """C{offset} and C{limit} applied to C{items}."""
        limit = self.limit if self.limit > 0 and (maximum is None or self.limit <= maximum) else maximum
        items = items[max(self.offset, 0):]
        return items if limit is None else items[:limit]


def subjects(state: RegistryState, listing: Listing) -> list[str]:
    """C{GET /subjects}: the subjects with a version passing the filters, in order."""
    return listing.page([subject for subject, versions in sorted(state.subjects.items())
                         if subject.startswith(listing.prefix) and any(map(listing.keeps, versions.values()))])


def versions(state: RegistryState, subject: str, listing: Listing) -> list[int]:
    """C{GET /subjects/S/versions}.

    @raise RestError: 40401, the subject has no version (none soft-deleted either, with C{deleted} or
        C{deletedOnly}).
    """
    state.versions(subject, deleted=listing.deleted or listing.deleted_only)
    kept = [v for _, v in sorted(state.subjects[subject].items()) if listing.keeps(v)]
    return listing.page([-v.version if v.deleted and listing.as_negative else v.version for v in kept])


def schemas(state: RegistryState, listing: Listing) -> list[dict]:
    """C{GET /schemas}: every subject version passing the filters (each subject's latest with C{latestOnly}),
    by subject and version, as C{GET /subjects/S/versions/V} answers each."""
    found = []
    for subject, entries in sorted(state.subjects.items()):
        if not subject.startswith(listing.prefix):
            continue
        kept = [v for _, v in sorted(entries.items()) if listing.deleted or not v.deleted]
        found += [state.describe(subject, v) for v in (kept[-1:] if listing.latest_only else kept)]
    return listing.page(found, SCHEMAS_LIMIT)


def holders(state: RegistryState, schema_id: int, listing: Listing, subjects: bool = False) -> list:
    """C{GET /schemas/ids/N/versions} (C{{"subject", "version"}} each) and C{/subjects} (with C{subjects}): what holds
    the id, soft-deleted versions too with C{deleted}, C{offset} and C{limit} applied (C{subject}, which only
    picks a context, is unused).

    @raise RestError: 40403, the id is not served.
    """
    first = state.served(schema_id)
    pairs = sorted((subject, v.version) for subject, entries in state.subjects.items()
                   for v in entries.values() if v.schema_id == first and (listing.deleted or not v.deleted))
    if subjects:
        return listing.page(list(dict.fromkeys(subject for subject, _ in pairs)))
    return listing.page([{"subject": subject, "version": version} for subject, version in pairs])


def latest_with_metadata(state: RegistryState, subject: str, args: dict) -> dict:
    """C{GET /subjects/S/metadata?key=K&value=V...[&deleted=true]}: the subject's latest version whose metadata
    properties hold every C{key}=C{value} pair given (paired in order, as Confluent pairs them).

    @raise RestError: 40401 (the subject has no version), 40403 (none matches).
    """
    deleted = flag(args, "deleted")
    pairs = set(zip((k.decode(errors="replace") for k in args.get(b"key", [])),
                    (v.decode(errors="replace") for v in args.get(b"value", []))))
    for entry in reversed(state.versions(subject, deleted=deleted)):
        properties = state.extras.get(entry.schema_id, {}).get("metadata", {}).get("properties")
        if isinstance(properties, dict) and pairs <= set(properties.items()):
            return state.describe(subject, entry)
    raise errors.schema_not_found()
