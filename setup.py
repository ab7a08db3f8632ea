"""The build of twlog's one compiled extension, the message walk (twlog/storage/_kernel.pyx); the rest is setup.cfg.

The extension is optional, as aiokafka's are: built when Cython (pyproject.toml's build requirements) and a
C compiler are there; without them, or when the compilation fails, the build says so in one line and goes on,
and twlog runs its pure-Python kernel (twlog/storage/walk_py.py; `twlog --version` names the one in use).
TWLOG_NO_EXTENSIONS=1 skips the extension.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that logs a failed compilation and goes on (the pure-Python kernel then runs)."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # no compiler at all
            self._skip(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # a compiler that failed
            self._skip(e)

    @staticmethod
    def _skip(error):
        print(f"twlog: the compiled kernel was not built ({error}); the pure-Python kernel will run", file=sys.stderr)


def extensions():
    if os.environ.get("TWLOG_NO_EXTENSIONS", "") not in ("", "0"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("twlog: Cython is missing: the compiled kernel is not built", file=sys.stderr)
        return []
    kernel = Extension("twlog.storage._kernel", ["twlog/storage/_kernel.pyx"], depends=["twlog/storage/_crc32.h"],
                       extra_compile_args=["-O3"])
    return cythonize([kernel], quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
