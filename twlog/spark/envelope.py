# -*- test-case-name: tests.spark.test_envelope,tests.integration.test_audit -*-
"""The Spark source's option C{envelope}: audit envelopes opened into columns (L{twlog.envelope}).

With C{.option("envelope", "true")} every row's C{value} is the original
payload, and four columns follow the source's usual ones: C{origin string},
C{instance long}, C{created_ms long} (the creation time, ms since the epoch)
and C{sequence long}; they are null for a message without an envelope (an
un-instrumented producer), whose value is left as it is.  These are the
columns L{twlog.audit.spark.audit_dataframe} counts.  pyarrow is imported
only on the executors that open batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from twlog.envelope import open_envelope

#: The columns the option adds, after the source's own.
ENVELOPE_COLUMNS = "origin string, instance long, created_ms long, sequence long"


def enabled(options: Mapping[str, str] | None) -> bool:
    """Whether the source's raw options (any case) ask for C{envelope}."""
    for key, value in dict(options or {}).items():
        if str(key).lower() == "envelope":
            return str(value).strip().lower() in ("true", "1", "yes")
    return False


def envelope_schema(schema: str, options: Mapping[str, str] | None) -> str:
    """The source's schema, with L{ENVELOPE_COLUMNS} when the options ask for them."""
    return f"{schema}, {ENVELOPE_COLUMNS}" if enabled(options) else schema


def open_batches(batches: Iterable, wanted: bool) -> Iterator:
    """The record batches, each opened (L{open_batch}) when C{wanted}."""
    for batch in batches:
        yield open_batch(batch) if wanted else batch


def _open(value: bytes):
    try:
        return open_envelope(value)
    except ValueError:  # an envelope version this twlog does not know: left as it is
        return None


def open_batch(batch):
    """C{batch} with each C{value} out of its envelope and the envelope's fields as four more columns."""
    import pyarrow as pa

    values = batch.column(batch.schema.get_field_index("value")).to_pylist()
    opened = [_open(v) for v in values]
    columns = {
        "value": pa.array([o.payload if o is not None else v for o, v in zip(opened, values)], pa.binary()),
        "origin": pa.array([o.origin if o is not None else None for o in opened], pa.string()),
        "instance": pa.array([o.instance if o is not None else None for o in opened], pa.int64()),
        "created_ms": pa.array([o.created_ms if o is not None else None for o in opened], pa.int64()),
        "sequence": pa.array([o.sequence if o is not None else None for o in opened], pa.int64()),
    }
    names = [*batch.schema.names, "origin", "instance", "created_ms", "sequence"]
    arrays = [columns.get(name, batch.column(i) if i < batch.num_columns else None) for i, name in enumerate(names)]
    return pa.RecordBatch.from_arrays(arrays, names=names)


__all__ = ["ENVELOPE_COLUMNS", "enabled", "envelope_schema", "open_batch", "open_batches"]
