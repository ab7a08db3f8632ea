"""Argument types, the parser class and the subcommand factory every C{twlog} subcommand shares."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from twisted.python import usage

from twlog.cli.zk_options import add_zookeeper_credentials_option

T = TypeVar("T")


def type_checked(parse: Callable[[str], T], text: str, *errors: type[Exception]) -> T:
    """C{parse(text)} for an argparse C{type=} function: the C{errors} it raises (by default ValueError) become an
    C{ArgumentTypeError} with their text, which argparse prints as one line before it exits 2."""
    caught = errors or (ValueError,)
    try:
        return parse(text)
    except caught as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def positive_option(command: argparse.ArgumentParser, *flags: str, default: int, help: str, **options) -> None:
    """Add to C{command} an option taking a positive whole number, whose help ends with its default (so the two
    cannot disagree)."""
    command.add_argument(*flags, type=positive_int, default=default, help=f"{help} (default: {default})", **options)


def int_list(text: str) -> list[int]:
    return [positive_int(part) for part in text.split(",") if part]


def name_list(what: str, names: Sequence[str]) -> Callable[[str], list[str]]:
    """The argparse type of a comma-separated list of C{names} (one at least, in the order given, repeats kept):
    anything else is refused with a message saying which C{what} there are."""
    known = ", ".join(names[:-1]) + " and " + names[-1]

    def chosen(text: str) -> list[str]:
        parts = [part for part in text.split(",") if part]
        if not parts or any(part not in names for part in parts):
            raise argparse.ArgumentTypeError(f"{what} are {known}, not {text!r}")
        return parts

    return chosen


#: C{twlog bench rebalance --scenario}.
scenarios = name_list("scenarios", ("start", "join"))
#: C{twlog bench broker} and C{latency --flush-policy}.
flush_policies = name_list("flush policies", ("group", "timer"))
#: C{twlog bench compare --systems}.
peer_systems = name_list("systems", ("twlog", "rabbitmq", "activemq"))


def subcommand(parent, name: str, run: str, help: str, description: str, *, react: bool = False,
               **options) -> argparse.ArgumentParser:
    """The parser of C{name}, a subcommand of C{parent} (an C{add_subparsers} result) that runs C{run}.

    C{run} names the function as C{"module:function"}, imported only when the
    command runs (so C{--help} stays fast); with C{react}, the function is a
    coroutine run under C{task.react} (L{twlog.cli.common.run}).
    """
    command = parent.add_parser(name, help=help, description=description, **options)
    command.set_defaults(run=run, **({"react": True} if react else {}))
    return command


class Parser(argparse.ArgumentParser):
    def add_argument(self, *flags, **options):
        """As argparse's; a C{--zookeeper} option brings C{--zookeeper-credentials-file} with it."""
        action = super().add_argument(*flags, **options)
        if "--zookeeper" in flags:
            add_zookeeper_credentials_option(self, inherit=options.get("default") is argparse.SUPPRESS)
        return action

    def error(self, message: str):  # one line, then exit 2, as argparse does
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_usage(options: usage.Options, command: str, argv: Sequence[str]) -> usage.Options | int:
    """C{options} parsed from C{argv} (a C{twistd} plugin's options run as C{twlog COMMAND}), or the exit
    status when there is nothing to run: 0 after C{--help}, 2 after one line naming a bad option."""
    try:
        options.parseOptions(list(argv))
    except usage.UsageError as e:
        print(f"twlog {command}: error: {e} (twlog {command} --help lists the options)", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    return options
