# -*- test-case-name: tests.storage.test_kernel -*-
"""The message walk's kernel: the compiled one (L{twlog.storage._kernel}, Cython) when it is built, else the
pure-Python fallback (L{twlog.storage.walk_py}); C{TWLOG_PURE_PYTHON=1} forces the fallback.

Both have the same functions and results (docs/performance.md, "The compiled kernel"):
L{walk} takes the whole, valid entries of a message set and says where it stopped; L{whole_end}
reads length fields only, and L{index_walk} notes a message start every few KB on the way (the position
index); L{gather} lays the payloads of walked entries end to end (Arrow's layout); L{produce_frames} walks a
buffer of PRODUCE frames and checks their sets (the broker's bulk produce path, L{twlog.protocol.runs}), and
L{join_sets} lays their sets end to end; L{encode_set} and L{produce_frame} build a message set and a
PRODUCE frame (the producer's side).  Their callers (L{twlog.storage.batch}, L{twlog.storage.validation},
L{twlog.storage.index}, L{twlog.spark.arrow}) diagnose the entry a walk stopped at in Python, so every error is
the one the Python code has always raised.  C{twlog --version} names the kernel in use (L{KERNEL}).
"""

from __future__ import annotations

import os

from twlog.storage import walk_py
from twlog.storage.compression import KNOWN_CODECS

__all__ = ["FRAME_FIELDS", "KERNEL", "MAGIC1", "RUN_FIELDS", "UNIFORM", "WRAPPERS", "compiled", "encode_set",
           "gather", "index_walk", "join_sets", "produce_frame", "produce_frames", "pure", "walk", "whole_end"]

if KNOWN_CODECS != {0, 1, 2}:  # pragma: no cover - both walks take attributes 0-2 as the known codecs
    raise ImportError(f"the message walk knows codecs 0-2, not {sorted(KNOWN_CODECS)}")

#: The pure-Python kernel (always there).
pure = walk_py

#: The compiled kernel, or None when it is not built (or cannot load).
compiled = None
try:
    from twlog.storage import _kernel as compiled  # type: ignore[no-redef]
except ImportError:  # pragma: no cover - depends on the build
    compiled = None

_chosen = pure if compiled is None or os.environ.get("TWLOG_PURE_PYTHON", "") not in ("", "0") else compiled

#: Which kernel runs: "compiled" or "pure Python".
KERNEL = "compiled" if _chosen is compiled else "pure Python"

MAGIC1 = walk_py.MAGIC1
WRAPPERS = walk_py.WRAPPERS
UNIFORM = walk_py.UNIFORM

walk = _chosen.walk
gather = _chosen.gather
whole_end = _chosen.whole_end

# -- produce frames (the broker's bulk produce path, twlog.protocol.runs) ----------------------------------------

FRAME_FIELDS = walk_py.FRAME_FIELDS
RUN_FIELDS = walk_py.RUN_FIELDS
produce_frames = _chosen.produce_frames
join_sets = _chosen.join_sets

# -- The index walk (twlog.storage.index, twlog.storage.recovery) --
index_walk = _chosen.index_walk

# -- Encoding (the producer's side) ---------------------------------------------------------------------------------
#: The message set of payloads (magic 0, no codec), and a PRODUCE frame with its size prefix, in one buffer.
encode_set = _chosen.encode_set
produce_frame = _chosen.produce_frame
