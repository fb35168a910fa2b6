"""What the drivers send becomes the declared batch, with nothing coerced silently."""

import datetime
import struct

import pyarrow as pa
import pytest

from outbox_spark.arrow_schema import ARROW_SCHEMA
from outbox_spark.wire_batches import WIRE_SCHEMA, declared_batch, xid8_as_int64

APPENDED_AT = datetime.datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.UTC)
TRANSACTION_IDS = [740, (7 << 32) | 12, 2**62 + 1]


def xid8_bytes(values: list[int]) -> pa.Array:
    """xid8 values as PostgreSQL's binary COPY sends them: unsigned, big-endian."""
    return pa.array([struct.pack(">Q", value) for value in values], pa.binary())


def wire_batch(transaction_id: pa.Array, data: pa.Array, headers: pa.Array) -> pa.RecordBatch:
    """A batch as a driver returns it: every column nullable, with the driver's metadata."""
    rows = len(transaction_id)
    columns = [
        pa.array(range(1, rows + 1), pa.int64()),
        transaction_id,
        pa.array([f"m-{n}" for n in range(rows)], pa.string()),
        pa.array(["OrderPlaced"] * rows, pa.string()),
        pa.array([None, *["key"] * (rows - 1)], pa.string()),
        data,
        headers,
        pa.array([APPENDED_AT] * rows, pa.timestamp("us", tz="UTC")),
    ]
    fields = [
        pa.field(name, column.type, True, metadata={"POSTGRESQL:type": "x"})
        for name, column in zip(WIRE_SCHEMA.names, columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def expected_rows(publication: str) -> list[dict[str, object]]:
    return [
        {
            "position": n + 1,
            "transaction_id": transaction_id,
            "publication": publication,
            "message_id": f"m-{n}",
            "message_type": "OrderPlaced",
            "partition_key": None if n == 0 else "key",
            "data": '{"amount": 1}',
            "headers": "{}",
            "appended_at": APPENDED_AT,
        }
        for n, transaction_id in enumerate(TRANSACTION_IDS)
    ]


def test_an_adbc_batch_becomes_the_declared_one() -> None:
    # ADBC: xid8 as opaque bytes, jsonb as Arrow's JSON extension type.
    opaque = pa.opaque(pa.binary(), "xid8", "PostgreSQL")
    json = pa.json_(pa.string())
    batch = wire_batch(
        pa.ExtensionArray.from_storage(opaque, xid8_bytes(TRANSACTION_IDS)),
        pa.ExtensionArray.from_storage(json, pa.array(['{"amount": 1}'] * 3)),
        pa.ExtensionArray.from_storage(json, pa.array(["{}"] * 3)),
    )

    declared = declared_batch(batch, "it's orders")

    assert declared.schema.equals(ARROW_SCHEMA)
    assert declared.to_pylist() == expected_rows("it's orders")


def test_a_csv_batch_becomes_the_declared_one() -> None:
    batch = wire_batch(
        pa.array(TRANSACTION_IDS, pa.int64()),
        pa.array(['{"amount": 1}'] * 3),
        pa.array(["{}"] * 3),
    )

    assert declared_batch(batch, "orders").to_pylist() == expected_rows("orders")


def test_a_column_of_another_type_is_refused_and_named() -> None:
    batch = wire_batch(
        pa.array(TRANSACTION_IDS, pa.int64()),
        pa.array(['{"amount": 1}'] * 3, pa.large_string()),
        pa.array(["{}"] * 3),
    )
    with pytest.raises(TypeError, match="data: large_string"):
        declared_batch(batch, "orders")


def test_a_slice_of_xid8_values_decodes_only_its_own_rows() -> None:
    # An array's offset into a shared buffer must be honoured, not read from byte 0.
    values = xid8_as_int64(xid8_bytes(TRANSACTION_IDS).slice(1, 2))
    assert values.to_pylist() == TRANSACTION_IDS[1:]


@pytest.mark.parametrize(
    ("column", "complaint"),
    [
        (pa.array([b"\x00" * 7], pa.binary()), "widths must match"),
        (pa.array([None], pa.binary()), "NULL"),
    ],
)
def test_a_value_that_is_no_xid8_is_refused(column: pa.Array, complaint: str) -> None:
    with pytest.raises((TypeError, pa.ArrowInvalid), match=complaint):
        xid8_as_int64(column)
