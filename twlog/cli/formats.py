# -*- test-case-name: tests.cli.test_formats -*-
"""How C{twlog consume} prints a message: its value, JSON, or a kcat-like format.

A consumed message prints as its value and a newline (the default), as one
JSON object per line (C{--json}: topic, partition C{<broker id>-<partition>},
offset, value as text, or base64 with C{"encoding": "base64"} when it is not
UTF-8), or through C{--format} as kcat does it: C{%t} topic, C{%p} partition,
C{%o} offset, C{%s} value, C{%S} value size in bytes, C{%%} a percent sign,
C{\\n} newline, C{\\t} tab.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from twlog.cli.parsing import type_checked

#: A message printer: (topic, partition name, offset, value) -> the bytes to write.
Formatter = Callable[[str, str, int, bytes], bytes]

_FIELDS = {
    "t": lambda topic, partition, offset, value: topic.encode(),
    "p": lambda topic, partition, offset, value: partition.encode(),
    "o": lambda topic, partition, offset, value: str(offset).encode(),
    "s": lambda topic, partition, offset, value: value,
    "S": lambda topic, partition, offset, value: str(len(value)).encode(),
}
_ESCAPES = {"n": b"\n", "t": b"\t", "\\": b"\\"}


def compile_format(text: str) -> Formatter:
    """The formatter of a kcat-like format string.

    @raise ValueError: an unknown C{%} field or backslash escape, naming it and the accepted ones.
    """
    parts: list[bytes | Callable] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in "%\\" and i + 1 < len(text):
            code = text[i + 1]
            if char == "%" and code in _FIELDS:
                parts.append(_FIELDS[code])
            elif char == "%" and code == "%":
                parts.append(b"%")
            elif char == "\\" and code in _ESCAPES:
                parts.append(_ESCAPES[code])
            else:
                raise ValueError(
                    f"format {text!r}: {char + code!r} is not one of %t (topic), %p (partition), %o (offset), "
                    "%s (value), %S (size), %%, \\n, \\t, \\\\"
                )
            i += 2
        elif char == "%":
            raise ValueError(f"format {text!r} ends with a lone '%'")
        else:
            parts.append(char.encode())
            i += 1

    def format_message(topic: str, partition: str, offset: int, value: bytes) -> bytes:
        return b"".join(p if isinstance(p, bytes) else p(topic, partition, offset, value) for p in parts)

    return format_message


def format_option(text: str) -> Formatter:
    """L{compile_format} as an argparse type."""
    return type_checked(compile_format, text)


def message_json(topic: str, partition: str, offset: int, value: bytes) -> dict[str, Any]:
    """One message as the JSON object C{--json} prints."""
    record: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset}
    try:
        record["value"] = value.decode("utf-8")
    except UnicodeDecodeError:
        record["value"] = base64.b64encode(value).decode("ascii")
        record["encoding"] = "base64"
    return record


def json_line(topic: str, partition: str, offset: int, value: bytes) -> bytes:
    """L{message_json} as one line of bytes."""
    return json.dumps(message_json(topic, partition, offset, value), ensure_ascii=False).encode("utf-8") + b"\n"


def record_json_line(topic: str, partition: str, offset: int, value: bytes) -> bytes:
    """C{--json} with C{--registry}: the value is the decoded record's JSON, put in as an object, not a string."""
    record = {"topic": topic, "partition": partition, "offset": offset, "value": json.loads(value)}
    return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"


def value_line(topic: str, partition: str, offset: int, value: bytes) -> bytes:
    """The default: the value and a newline."""
    return value + b"\n"


def message_formatter(args) -> Formatter:
    """The formatter C{--json} or C{--format} asks for (the value and a newline by default)."""
    if getattr(args, "json", False):
        return record_json_line if getattr(args, "registry", None) else json_line
    return getattr(args, "format", None) or value_line
