"""Cutting a batch into tasks: every row of (start, end] in exactly one slice."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.positions import Position
from outbox_spark.partitions import Slice, key_slices, range_slices

rows_strategy = st.lists(
    st.builds(Position, st.integers(1, 50), st.integers(1, 50)), min_size=2, unique=True
).map(sorted)


def rows_in(part: Slice, rows: list[Position]) -> list[Position]:
    return [row for row in rows if part.after < row <= part.until]


@given(rows_strategy, st.data())
def test_range_slices_tile_the_batch_in_order(rows: list[Position], data: st.DataObject) -> None:
    start_index = data.draw(st.integers(0, len(rows) - 2))
    end_index = data.draw(st.integers(start_index + 1, len(rows) - 1))
    start, end = rows[start_index], rows[end_index]
    inside = rows[start_index + 1 : end_index]
    points = sorted(data.draw(st.sets(st.sampled_from(inside))) if inside else [])

    slices = range_slices(start, end, points)

    assert [row for part in slices for row in rows_in(part, rows)] == rows[
        start_index + 1 : end_index + 1
    ]
    assert len(slices) == len(points) + 1
    assert all(not part.by_key for part in slices)


def test_an_empty_batch_has_no_slices() -> None:
    position = Position(5, 5)
    assert range_slices(position, position, []) == []
    assert key_slices(position, position, 4) == []


@pytest.mark.parametrize(
    "points",
    [
        [Position(3, 1), Position(2, 1)],  # descending
        [Position(2, 1), Position(2, 1)],  # repeated
        [Position(1, 1)],  # at the start: the first slice would be empty
        [Position(9, 9)],  # at the end
        [Position(10, 1)],  # past the end
    ],
)
def test_split_points_that_would_leave_a_gap_or_overlap_are_refused(
    points: list[Position],
) -> None:
    with pytest.raises(ValueError, match="do not ascend strictly"):
        range_slices(Position(1, 1), Position(9, 9), points)


def test_key_slices_cover_the_whole_batch_once_per_bucket() -> None:
    start, end = Position(1, 1), Position(9, 9)
    slices = key_slices(start, end, 3)
    assert [(part.after, part.until, part.bucket, part.buckets) for part in slices] == [
        (start, end, 0, 3),
        (start, end, 1, 3),
        (start, end, 2, 3),
    ]
    assert all(part.by_key for part in slices)


def test_one_key_bucket_reads_the_range_without_hashing() -> None:
    (only,) = key_slices(Position(1, 1), Position(9, 9), 1)
    assert not only.by_key


@pytest.mark.parametrize(
    ("after", "until", "bucket", "buckets", "message"),
    [
        (Position(2, 2), Position(2, 2), 0, 1, "after < until"),
        (Position(3, 1), Position(2, 9), 0, 1, "after < until"),
        (Position(1, 1), Position(2, 2), 3, 3, "bucket 3 is not in 0..2"),
        (Position(1, 1), Position(2, 2), -1, 3, "bucket -1"),
    ],
)
def test_a_malformed_slice_is_refused(
    after: Position, until: Position, bucket: int, buckets: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Slice(after, until, bucket, buckets)
