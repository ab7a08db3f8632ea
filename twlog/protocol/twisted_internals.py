# -*- test-case-name: tests.integration.test_twisted_internals -*-
"""The one module of twlog that reads or writes Twisted's private attributes.

Twisted has no public API for what these helpers answer, so each reads an
attribute Twisted documents only in its source.  Checked against Twisted 24.7
to 26.10 (setup.cfg pins C{twisted >= 24.7, < 26.11}):

  - L{buffered_bytes}: C{twisted.internet.abstract.FileDescriptor}'s write
    buffer, C{dataBuffer} from C{offset} on, plus C{_tempDataLen} (bytes
    written since the last C{doWrite}, still in C{_tempDataBuffer}).
  - L{is_plain_tcp}: C{twisted.internet.tcp.Connection}'s C{TLS} flag, which
    C{startTLS} sets (C{twisted.internet._newtls}).
  - L{forget_exit_signal}: the reactor's C{_exitSignal}, which
    C{ReactorBase}'s signal handlers set and twistd's C{ApplicationRunner}
    reads when the reactor returns (C{twisted.application.app}).

tests/integration/test_twisted_internals.py checks each against the real reactor
and a TCP connection on 127.0.0.1: a Twisted release that renames them fails
there, loudly, instead of making L{buffered_bytes} quietly answer 0 (which
would let sendfile overtake buffered bytes).  Upgrading Twisted past the pin
means running that test first.
"""

from __future__ import annotations

import os
import sys

from twisted.internet import abstract, tcp


def buffered_bytes(transport) -> int:
    """Bytes written to C{transport} that wait in its write buffer, not yet handed to the socket.

    A Twisted file descriptor transport (TCP, UNIX, ...) is read exactly, and
    raises C{AttributeError} if Twisted renamed its buffer; any other
    transport counts its C{dataBuffer}, if it has one (test transports), else 0.
    """
    if isinstance(transport, abstract.FileDescriptor):
        return len(transport.dataBuffer) - transport.offset + transport._tempDataLen
    data = getattr(transport, "dataBuffer", None)
    if data is None:
        return 0
    return len(data) - getattr(transport, "offset", 0) + getattr(transport, "_tempDataLen", 0)


def is_plain_tcp(transport) -> bool:
    """Whether C{transport} is a Twisted TCP connection that has not started TLS (so its socket carries our bytes
    as they are: sendfile and direct sends may use it)."""
    return isinstance(transport, tcp.Connection) and not transport.TLS


def forget_exit_signal(reactor) -> None:
    """Make twistd forget the signal that stopped C{reactor}, so that it does not end the process with that signal
    again (a reactor without signal handling has nothing to forget)."""
    if getattr(reactor, "_exitSignal", None) is not None:
        reactor._exitSignal = None


def exit_now(code: int) -> None:
    """End the process with C{code}: for an exit handler registered once twistd's reactor has stopped, where
    C{SystemExit} would not change the status (twistd has no exit status of its own to set)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
