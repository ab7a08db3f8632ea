# -*- test-case-name: tests.schema_registry.test_references -*-
"""What a registration may carry besides its schema, checked as Confluent's registry checks it.

A C{ruleSet} is checked as Confluent's C{RuleSet.validate()} and C{Rule.validate()} do (rules are stored and
answered, never run here: the clients run them), and answered 42210 when malformed.  C{references} are
C{{"name", "subject", "version"}} objects (Confluent's C{SchemaReference}); resolving them needs the registry's
state (L{twlog.schema_registry.state.RegistryState.resolve}).
"""

from __future__ import annotations

from twlog.schema_registry import errors

#: Confluent's C{Rule.NAME_MAX_LENGTH}.
NAME_MAX_LENGTH = 256
KINDS = ("TRANSFORM", "CONDITION")
MIGRATION_MODES = ("UPGRADE", "DOWNGRADE", "UPDOWN")
DOMAIN_MODES = ("WRITE", "READ", "WRITEREAD")
#: The rule lists of a rule set, and the modes each takes (with the message Confluent gives for another).
RULE_LISTS = {
    "migrationRules": (MIGRATION_MODES, "Migration rules can only be UPGRADE, DOWNGRADE, UPDOWN"),
    "domainRules": (DOMAIN_MODES, "Domain rules can only be WRITE, READ, WRITEREAD"),
    "encodingRules": (DOMAIN_MODES, "Encoding rules can only be WRITE, READ, WRITEREAD"),
}


def check_rule_set(rule_set: dict) -> None:
    """@raise RestError: 42210 naming the first thing wrong, in Confluent's words."""
    names: set[str] = set()
    for key, (modes, wrong_mode) in RULE_LISTS.items():
        rules = rule_set.get(key)
        if rules is None:
            continue
        if not isinstance(rules, list):
            raise errors.invalid_rule_set(f"{key} must be a list of rules")
        for rule in rules:
            if not isinstance(rule, dict):
                raise errors.invalid_rule_set(f"a rule of {key} must be a JSON object")
            name = rule.get("name")
            if name in names:
                raise errors.invalid_rule_set(f"Found rule with duplicate name '{name}'")
            _check_rule(rule)
            names.add(name)
            if (rule.get("mode") or "WRITEREAD") not in modes:
                raise errors.invalid_rule_set(wrong_mode)


def _check_rule(rule: dict) -> None:
    name = rule.get("name")
    if name is None:
        raise errors.invalid_rule_set("Missing rule name")
    if not isinstance(name, str) or not name:
        raise errors.invalid_rule_set("Empty rule name")
    if len(name) > NAME_MAX_LENGTH:
        raise errors.invalid_rule_set("Rule name too long")
    if not (name[0].isalpha() or name[0] == "_"):
        raise errors.invalid_rule_set(f"Illegal initial character in rule name: {name}")
    if any(not (c.isalnum() or c in "_-") for c in name[1:]):
        raise errors.invalid_rule_set(f"Illegal character in rule name: {name}")
    kind, mode = rule.get("kind") or "TRANSFORM", rule.get("mode") or "WRITEREAD"
    if kind not in KINDS:
        raise errors.invalid_rule_set(f"Invalid rule kind {kind!r}: one of {', '.join(KINDS)}")
    if mode not in MIGRATION_MODES + DOMAIN_MODES:
        raise errors.invalid_rule_set(f"Invalid rule mode {mode!r}: one of {', '.join(MIGRATION_MODES + DOMAIN_MODES)}")
    if not rule.get("type"):
        raise errors.invalid_rule_set("Missing rule type")
    for action in (rule.get("onSuccess"), rule.get("onFailure")):
        if mode not in ("WRITEREAD", "UPDOWN") and isinstance(action, str) and "," in action:
            raise errors.invalid_rule_set("Multiple actions only valid with WRITEREAD and UPDOWN")


def check_references(references: object) -> list[dict]:
    """The C{references} of a registration, each C{{"name", "subject", "version"}} (version -1: the latest).

    @raise RestError: 42201 for a malformed one (Confluent: C{Invalid reference}).
    """
    if not isinstance(references, list):
        raise errors.invalid_schema(f"references must be a list, not {type(references).__name__}")
    checked = []
    for reference in references:
        if not (isinstance(reference, dict) and isinstance(reference.get("name"), str)
                and isinstance(reference.get("subject"), str) and type(reference.get("version")) is int):
            raise errors.invalid_schema(f"Invalid reference: {reference}")
        checked.append({"name": reference["name"], "subject": reference["subject"], "version": reference["version"]})
    return checked


def resolve(state, references: list[dict]) -> list[str]:
    """The texts of the schemas C{references} name, each after those it references in turn (Confluent's
    C{resolveReferences}: depth first, a name taken once).

    @raise RestError: 42201 for a reference to a subject version that does not exist.
    """
    texts: list[str] = []
    seen: set[str] = set()

    def visit(refs: list[dict]) -> None:
        for reference in refs:
            if reference["name"] in seen:
                continue
            seen.add(reference["name"])
            entry = state.subjects.get(reference["subject"], {}).get(reference["version"])
            if entry is None:
                raise errors.invalid_schema(f'No schema reference found for subject "{reference["subject"]}" '
                                            f'and version {reference["version"]}')
            visit(state.extras.get(entry.schema_id, {}).get("references", []))
            texts.append(state.schemas[entry.schema_id])

    visit(references)
    return texts


def referenced_by(state, subject: str, version: int, deleted: bool = False) -> list[int]:
    """The ids of the versions (soft-deleted ones too with C{deleted}) whose schema references C{subject}'s
    C{version} (Confluent's C{GET /subjects/{s}/versions/{v}/referencedby}), ascending."""
    found = set()
    for versions in state.subjects.values():
        for entry in versions.values():
            if entry.deleted and not deleted:
                continue
            for reference in state.extras.get(entry.schema_id, {}).get("references", []):
                if reference["subject"] == subject and reference["version"] == version:
                    found.add(entry.schema_id)
    return sorted(found)
