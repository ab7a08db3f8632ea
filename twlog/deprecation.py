# -*- test-case-name: tests.test_deprecation -*-
"""Renamed keywords and arguments: the old spelling keeps working, with a L{DeprecationWarning} naming the new one."""

from __future__ import annotations

import warnings
from typing import TypeVar

T = TypeVar("T")

__all__ = ["renamed", "renamed_attribute"]


def renamed(old: str, new: str, old_value: T | None, new_value: T | None, *, stacklevel: int = 3) -> T | None:
    """The value given for C{new}, or, given under its old name C{old}, that value with a DeprecationWarning.

    @raise TypeError: both names were given.
    """
    if old_value is None:
        return new_value
    if new_value is not None:
        raise TypeError(f"give {new}= only ({old}= is its old name)")
    warnings.warn(f"{old}= is deprecated: use {new}=", DeprecationWarning, stacklevel=stacklevel)
    return old_value


def renamed_attribute(old: str, new: str) -> property:
    """A read-only property C{old} that gives attribute C{new}, with a DeprecationWarning naming it."""

    def get(self):
        warnings.warn(f"{type(self).__name__}.{old} is deprecated: use .{new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated: use L{{{new}}}.")
