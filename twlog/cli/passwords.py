# -*- test-case-name: tests.cli.test_users -*-
"""Passwords for the command line, never on it: from a file (C{--password-file}), or asked on the terminal."""

from __future__ import annotations

import getpass
import sys

from twlog.errors import TwlogError

__all__ = ["prompt_password", "read_password_file"]


def read_password_file(path: str, option: str = "--password-file") -> str:
    """The password in the first line of C{path} (its line end left out).

    @raise TwlogError: it cannot be read, or the line is empty (one line naming C{option} and the file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline()
    except (OSError, UnicodeDecodeError) as e:
        raise TwlogError(f"cannot read {option} {path}: {getattr(e, 'strerror', None) or e}") from None
    password = line.rstrip("\r\n")
    if not password:
        raise TwlogError(f"{option} {path}: its first line (the password) is empty")
    return password


def prompt_password(user: str, stdin=None, ask=getpass.getpass) -> str:
    """A new password for C{user}, asked twice on the terminal.

    @raise TwlogError: stdin is not a terminal (then a file must give it), the two differ, or it is empty.
    """
    stdin = sys.stdin if stdin is None else stdin
    if not stdin.isatty():
        raise TwlogError("no password: give --password-file FILE (a password is never taken from the command line; "
                         "one is asked only on a terminal)")
    first = ask(f"password for {user}: ")
    if not first:
        raise TwlogError("the password is empty")
    if ask(f"password for {user} again: ") != first:
        raise TwlogError("the two passwords differ: nothing was changed")
    return first
