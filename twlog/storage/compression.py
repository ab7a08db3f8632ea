# -*- test-case-name: tests.storage.test_compression -*-
"""Compression of message sets (gzip, snappy), with a bound on what decompressing may produce.

A compressed wrapper's payload comes from the network or from disk, so it is
hostile input: a 200 KB gzip payload can inflate to gigabytes.  L{decompress}
never produces (nor allocates) more than C{limit} bytes: gzip goes through
C{zlib.decompressobj} with C{max_length}, member by member in a loop; snappy's
blocks are checked against their declared length before each is decoded.
Nothing here recurses, and nothing here opens a wrapper found inside another:
that is the caller's rule (L{twlog.storage.message}), which refuses nesting.
"""

from __future__ import annotations

import struct
import zlib

from twlog.errors import InvalidMessage, MessageSizeTooLarge

try:  # optional: snappy compression (pip install 'twlog[snappy]')
    import cramjam
except ImportError:  # pragma: no cover - depends on the install
    cramjam = None

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_NAMES = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY}
#: The attribute bytes a magic-1 message may carry: a codec and no other bit.
KNOWN_CODECS = frozenset(CODEC_NAMES.values())

#: What a compressed wrapper may decompress to unless told otherwise: 10x the default largest message.
DEFAULT_MAX_DECOMPRESSED_BYTES = 10 * 1_000_000

_LENGTH = struct.Struct(">i")
_SNAPPY_JAVA_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_JAVA_HEADER = struct.Struct(">8sii")
_SNAPPY_BLOCK = 32 * 1024


class DecompressedTooLarge(MessageSizeTooLarge):
    """A compressed message decompresses to more than the bound (C{max_decompressed_bytes})."""


def codec_name(codec: int) -> str:
    """C{"gzip"} for 1, and so on; C{"codec-<n>"} for a number no codec has."""
    for name, number in CODEC_NAMES.items():
        if number == codec:
            return name
    return f"codec-{codec}"


def _snappy():
    if cramjam is None:  # pragma: no cover - depends on the install
        raise InvalidMessage("snappy needs the cramjam package: pip install 'twlog[snappy]'")
    return cramjam.snappy


def _too_large(codec: int, limit: int) -> DecompressedTooLarge:
    name = codec_name(codec)
    error = DecompressedTooLarge(f"a {name} message decompresses to more than max_decompressed_bytes={limit}")
    error.limit = limit
    return error


# -- gzip --------------------------------------------------------------------


def _gzip_compress(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # 31: gzip framing
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data: bytes | memoryview, limit: int) -> bytes:
    """gzip (or zlib) framing, concatenated members allowed; never more than C{limit} bytes out.

    Each member is inflated by one C{decompress} call with C{max_length} (zlib grows its
    output in large blocks up to it, never allocating the bound up front).
    """
    parts: list[bytes] = []
    left = limit
    pending = data
    while True:
        inflater = zlib.decompressobj(47)  # 47: gzip or zlib framing, detected
        out = inflater.decompress(pending, left + 1)
        if len(out) > left:
            raise _too_large(CODEC_GZIP, limit)
        parts.append(out)
        left -= len(out)
        if not inflater.eof:
            if inflater.unconsumed_tail:  # stopped by max_length: the output would pass the bound
                raise _too_large(CODEC_GZIP, limit)
            raise InvalidMessage("truncated gzip data")
        pending = inflater.unused_data
        if not pending:
            return parts[0] if len(parts) == 1 else b"".join(parts)


# -- snappy ------------------------------------------------------------------


def _snappy_compress(data: bytes) -> bytes:
    """snappy-java's stream framing, as Kafka 0.7 clients wrote it: a header, then length-prefixed blocks."""
    snappy = _snappy()
    parts = [_SNAPPY_JAVA_HEADER.pack(_SNAPPY_JAVA_MAGIC, 1, 1)]
    for start in range(0, len(data), _SNAPPY_BLOCK):
        block = bytes(snappy.compress_raw(data[start : start + _SNAPPY_BLOCK]))
        parts.append(_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_blocks(data: memoryview) -> list[memoryview]:
    """The raw blocks of a wrapper payload: snappy-java's stream framing, or one raw block."""
    if data[: len(_SNAPPY_JAVA_MAGIC)].tobytes() != _SNAPPY_JAVA_MAGIC:  # (comparing memoryviews is slow)
        return [data]
    pos = _SNAPPY_JAVA_HEADER.size
    n = len(data)
    if n - pos >= 4:  # the usual case, one block filling the rest: no list built up
        size = _LENGTH.unpack_from(data, pos)[0]
        if pos + 4 + size == n:
            return [data[pos + 4 :]]
    blocks = []
    if pos > n:
        raise InvalidMessage("truncated snappy header")
    while pos < n:
        if pos + 4 > n:
            raise InvalidMessage("truncated snappy block header")
        size = _LENGTH.unpack_from(data, pos)[0]
        if size < 0 or pos + 4 + size > n:
            raise InvalidMessage("truncated snappy block")
        blocks.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return blocks


def _snappy_decompress(data: bytes | memoryview, limit: int) -> bytes | bytearray:
    """Every block's declared length summed and checked against C{limit} first, then each block
    decoded straight into its place in one buffer of that size: nothing is allocated past the
    bound, and the output is written once.

    One block (a set under 32 KB, the usual case) is decoded by one call into C{bytes}, which
    the inner walk slices faster than a C{bytearray}: half this function's cost on a 50-message set.
    """
    snappy = _snappy()
    blocks = _snappy_blocks(memoryview(data))
    one = len(blocks) == 1
    lengths = None if one else [snappy.decompress_raw_len(block) for block in blocks]
    total = snappy.decompress_raw_len(blocks[0]) if one else sum(lengths)
    if total > limit:
        raise _too_large(CODEC_SNAPPY, limit)
    if one:
        out = bytes(snappy.decompress_raw(blocks[0]))
        written = len(out)
    else:
        # Several blocks: into a bytearray of the summed length (turning cramjam's output buffers
        # into bytes and joining them would copy every decompressed set twice).
        out = bytearray(total)
        view = memoryview(out)
        written = 0
        for block, length in zip(blocks, lengths):
            written += snappy.decompress_raw_into(block, view[written : written + length])
    if written != total:  # pragma: no cover - snappy itself refuses a block that disagrees
        raise InvalidMessage(f"snappy blocks declare {total} bytes and decode to {written}")
    return out


_CODECS = {
    CODEC_NONE: (bytes, lambda data, limit: bytes(data)),
    CODEC_GZIP: (_gzip_compress, _gzip_decompress),
    CODEC_SNAPPY: (_snappy_compress, _snappy_decompress),
}


def compress(codec: int, data: bytes) -> bytes:
    """Compress C{data} with C{codec} (a CODEC_* number)."""
    try:
        return _CODECS[codec][0](data)
    except KeyError:
        raise InvalidMessage(f"unknown codec {codec}") from None


def decompress(
    codec: int, data: bytes | memoryview, limit: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> bytes | bytearray:
    """Decompress a wrapper payload (any bytes-like value, read in place) into at most C{limit} bytes.

    @raise DecompressedTooLarge: the output would pass C{limit} (a L{MessageSizeTooLarge}).
    @raise InvalidMessage: an unknown codec, or a payload that does not decompress.
    """
    try:
        function = _CODECS[codec][1]
    except KeyError:
        raise InvalidMessage(f"unknown codec {codec}") from None
    try:
        return function(data, limit)
    except (InvalidMessage, MessageSizeTooLarge):
        raise
    except Exception as e:
        raise InvalidMessage(f"cannot decompress a {codec_name(codec)} message: {e}") from None
