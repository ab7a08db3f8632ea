"""A fake filesystem layer for storage tests: files under one directory fail as a full, quota-bound,
read-only or broken disk makes them fail, while every other file works.

L{FaultyDisk} replaces the C{os} module that segment files are created, written and cut back through
(C{twlog.storage.segment.os}) with one whose C{open}, C{write} and C{ftruncate} fail with a chosen errno
for paths under its directory (and for the descriptors of files there).  fsync failures are injected with
L{tests.fakes.ManualRunner.fail_one}, since fsyncs run on the thread pool.
"""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

from twlog.storage import segment as segment_module


def os_error(code: int) -> OSError:
    """The OSError the kernel's C{code} gives (C{[Errno 28] No space left on device})."""
    return OSError(code, os.strerror(code))


class FaultyDisk:
    """Make files under C{directory} fail; set the errno of each kind of failure (None: it works).

      - C{create_error}: creating a file (an open with O_CREAT): ENOSPC for inodes, EDQUOT, EROFS, EIO;
      - C{write_error}: write(2), after C{partial_bytes} of the data went in (a short write, then the error);
      - C{truncate_error}: ftruncate(2) (the cut-back after a failed write).

    C{creates_refused} and C{writes_refused} count the failures given, to show when the disk was tried.
    """

    def __init__(self, testcase, directory: str) -> None:
        self.directory = os.path.abspath(directory)
        self.create_error: int | None = None
        self.write_error: int | None = None
        self.truncate_error: int | None = None
        self.partial_bytes = 0
        self.creates_refused = 0
        self.writes_refused = 0
        fake = SimpleNamespace(**{**vars(os), "open": self._open, "write": self._write,
                                  "ftruncate": self._ftruncate})
        testcase.patch(segment_module, "os", fake)

    def heal(self) -> None:
        """Space, inodes, quota and the device are back: everything works again."""
        self.create_error = self.write_error = self.truncate_error = None

    def _under(self, path: str) -> bool:
        return os.path.abspath(path).startswith(self.directory + os.sep)

    def _fd_under(self, fd: int) -> bool:
        """Whether descriptor C{fd} is a file under the directory (opened before the disk was faulty too)."""
        try:
            return self._under(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False

    def _open(self, path, flags, mode=0o777, *, dir_fd=None):
        if self._under(path) and flags & os.O_CREAT and self.create_error is not None:
            self.creates_refused += 1
            raise os_error(self.create_error)
        return os.open(path, flags, mode, dir_fd=dir_fd)

    def _write(self, fd, data):
        if self.write_error is not None and self._fd_under(fd):
            self.writes_refused += 1
            if self.partial_bytes:
                os.write(fd, bytes(memoryview(data)[: self.partial_bytes]))
            raise os_error(self.write_error)
        return os.write(fd, data)

    def _ftruncate(self, fd, length):
        if self.truncate_error is not None and self._fd_under(fd):
            raise os_error(self.truncate_error)
        return os.ftruncate(fd, length)


#: The errors a failed roll (a new segment file that cannot be created) comes with.
ROLL_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
