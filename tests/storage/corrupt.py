"""Hostile and corrupt message sets for tests: an invalid gzip wrapper, deep nesting, a decompression bomb."""

from __future__ import annotations

import os
import zlib

from twlog.storage.crc import crc32
from twlog.storage.entry import HEADER0
from twlog.storage.message import CODEC_GZIP, compress, encode_message, encode_message_set

#: A magic-1 gzip wrapper whose CRC is right but whose payload is not gzip (as an older version could store).
NOT_GZIP = encode_message(b"this is not gzip data", CODEC_GZIP)


def nested_gzip(depth: int) -> bytes:
    """A gzip wrapper holding a gzip wrapper ... C{depth} deep, around one plain message."""
    data = encode_message_set([b"the bottom"])
    for _ in range(depth):
        data = encode_message(compress(CODEC_GZIP, data), CODEC_GZIP)
    return data


def gzip_bomb(inflated: int, chunk: int = 8 * 1024 * 1024) -> bytes:
    """A valid gzip wrapper around one plain message of C{inflated} zero bytes, built without holding them."""
    zeros = bytes(chunk)
    crc = 0
    for start in range(0, inflated, chunk):
        crc = zlib.crc32(zeros[: min(chunk, inflated - start)], crc)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [compressor.compress(HEADER0.pack(inflated + 5, 0, crc))]
    for start in range(0, inflated, chunk):
        parts.append(compressor.compress(zeros[: min(chunk, inflated - start)]))
    parts.append(compressor.flush())
    return encode_message(b"".join(parts), CODEC_GZIP)


def write_partition(log_dir: str, topic: str, *sets: bytes, partition: int = 0) -> list[int]:
    """Write C{sets} one after another as a partition's first segment, bypassing the broker's validation
    (like data written by an older version); the offset of each set."""
    directory = os.path.join(log_dir, f"{topic}-{partition}")
    os.makedirs(directory, exist_ok=True)
    offsets = []
    position = 0
    with open(os.path.join(directory, f"{0:020d}.log"), "wb") as f:
        for data in sets:
            offsets.append(position)
            f.write(data)
            position += len(data)
    return offsets


__all__ = ["NOT_GZIP", "crc32", "gzip_bomb", "nested_gzip", "write_partition"]
