"""A batch read's options: a range and no progress, each mistake named."""

import pytest

from outbox.positions import START, Position
from outbox_spark.options import (
    OptionError,
    PartitionBy,
    check_options,
    parse_batch_options,
)


def test_defaults_read_everything_safe_from_the_start() -> None:
    options = parse_batch_options({"publication": "orders"})
    assert options.start == START
    assert options.end is None  # the last safe row when the read is planned
    assert options.num_partitions == 1
    assert options.partition_by is PartitionBy.RANGE


def test_a_range_is_given_as_offsets_in_either_spelling() -> None:
    options = parse_batch_options(
        {"publication": "orders", "startingOffsets": "7:3", "endingOffsets": '{"tx": 9, "pos": 12}'}
    )
    assert (options.start, options.end) == (Position(7, 3), Position(9, 12))


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("subscription", "s", r"unknown option\(s\) subscription for a batch read"),
        ("maxRowsPerBatch", "10", r"unknown option\(s\) maxrowsperbatch for a batch read"),
        ("startingOffsets", "latest", r"option startingOffsets must be earliest, an offset"),
        ("endingOffsets", "earliest", r"option endingOffsets must be latest, an offset"),
        ("endingOffsets", "1:-1", "option endingOffsets must be latest"),
    ],
)
def test_what_a_batch_read_cannot_take_is_named(name: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_batch_options({"publication": "orders", name: value})


def test_at_load_a_failing_set_is_reported_for_the_read_it_looks_like() -> None:
    # Spark asks for the schema before saying which read it is.
    check_options({"publication": "orders"})  # a batch read
    check_options({"publication": "orders", "subscription": "s"})  # a stream
    with pytest.raises(OptionError, match="for a streaming query"):
        check_options({"publication": "orders", "subscription": "s", "endingOffsets": "1:1"})
    with pytest.raises(OptionError, match="for a batch read"):
        check_options({"publication": "orders", "numPartition": "2"})
