# -*- test-case-name: tests.storage.test_crc -*-
"""The CRC-32 of every message, and the check that crcmod runs as C.

The design card names crcmod.  Its predefined "crc-32" is the standard CRC-32,
the same function as the standard library's C{zlib.crc32} and as ISA-L's
(C{isal.isal_zlib.crc32}, carry-less-multiply folding).  On our machines
ISA-L's is about three times faster than zlib's on 200-byte payloads and
fifteen times crcmod's (C{twlog bench crc} measures all three; docs/storage.md
has the figures), so the hot path (encode, validate, recover, decode) uses
ISA-L's, and zlib's and crcmod's serve as the independent references the
tests and C{twlog bench crc} check it against.
crcmod must run its C extension: importing this module fails loudly if only
its pure-Python fallback is there, rather than run 100 times slower unnoticed.
"""

from __future__ import annotations

import sys
import zlib

import crcmod.predefined
from isal import isal_zlib

#: The hot-path CRC-32 (standard CRC-32, as DESIGN.md specifies): ISA-L's.
crc32 = isal_zlib.crc32

#: The standard library's CRC-32 (zlib's), a reference.
zlib_crc32 = zlib.crc32

#: crcmod's CRC-32: the reference implementation named by the design card.
crcmod_crc32 = crcmod.predefined.mkPredefinedCrcFun("crc-32")


def crcmod_uses_extension() -> bool:
    """Whether crcmod runs its C extension rather than its pure-Python fallback."""
    return bool(getattr(sys.modules["crcmod.crcmod"], "_usingExtension", False))


if not crcmod_uses_extension():  # pragma: no cover - depends on the install
    raise ImportError(
        "crcmod is running its pure-Python fallback: install a C compiler and the Python headers "
        "(apt-get install gcc python3-dev), then 'pip install --force-reinstall --no-binary crcmod crcmod'"
    )
