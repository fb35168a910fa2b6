"""From the columns a slice read returns to the declared ones. Pure, no I/O.

The read queries send what costs the server least: `transaction_id` as the stored xid8 and
`data`/`headers` as the stored jsonb, with no text casts (the `::text::bigint` cast alone cost
the server 14% of a 1M-row read), and no `publication`, which every row of a read shares.
The driver brings them into Arrow its own way (ADBC: xid8 as 8 big-endian bytes, jsonb as
Arrow's JSON extension type; pyarrow's CSV parser: whatever the declared types say), and this
module turns either into the declared schema without a per-row step in Python.
"""

import array
import sys

import pyarrow as pa

from outbox_spark.arrow_schema import ARROW_SCHEMA

PUBLICATION = "publication"
# The columns of the spark_read_* queries, in order: the declared ones but the publication.
WIRE_SCHEMA = pa.schema([field for field in ARROW_SCHEMA if field.name != PUBLICATION])
_PUBLICATION_INDEX = ARROW_SCHEMA.get_field_index(PUBLICATION)
_XID8_BYTES = 8


def declared_batch(wire: pa.RecordBatch, publication: str) -> pa.RecordBatch:
    """The declared batch: `wire`'s columns decoded, the publication put in its place.

    Drivers report every column nullable and attach their own field metadata, so only names
    and (decoded) types must match; a mismatch is refused, never coerced, since
    RecordBatch.from_arrays would not check the types itself.
    """
    if wire.schema.names != WIRE_SCHEMA.names:
        raise TypeError(f"the read returned columns {wire.schema.names}, not {WIRE_SCHEMA.names}")
    columns = [_decoded(column) for column in wire.columns]
    types = [column.type for column in columns]
    if types != WIRE_SCHEMA.types:
        described = ", ".join(f"{n}: {t}" for n, t in zip(WIRE_SCHEMA.names, types, strict=True))
        raise TypeError(f"the read returned {described}; the declared schema is {WIRE_SCHEMA}")
    columns.insert(_PUBLICATION_INDEX, pa.repeat(publication, wire.num_rows))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _decoded(column: pa.Array) -> pa.Array:
    # ADBC wraps jsonb (JSON text) and xid8 (opaque bytes) in extension types.
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    if column.type == pa.binary():  # ADBC's xid8: PostgreSQL's binary form, 8 bytes
        return xid8_as_int64(column)
    return column


def xid8_as_int64(column: pa.Array) -> pa.Array:
    """xid8 values in PostgreSQL's binary form (unsigned, big-endian) as int64.

    An xid8 is epoch << 32 | xid and stays far below 2**63, as the `::text::bigint` cast the
    queries used to make assumed. Two passes in C (copy, byte swap), none in Python.
    """
    if column.null_count:
        raise TypeError("a transaction id was NULL")
    fixed = column.cast(pa.binary(_XID8_BYTES))  # refuses any value that is not 8 bytes
    start = fixed.offset * _XID8_BYTES
    values = array.array("q")
    values.frombytes(memoryview(fixed.buffers()[1])[start : start + len(fixed) * _XID8_BYTES])
    if sys.byteorder == "little":
        values.byteswap()
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])
