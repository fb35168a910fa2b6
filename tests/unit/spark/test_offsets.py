"""Offsets and batch ends, without Spark or a database."""

import json
from bisect import bisect_right

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outbox.positions import START, Position
from outbox_spark.offsets import OffsetError, next_end, offset_of, position_of

positions = st.builds(Position, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
# Small values, so rows often share a transaction and ceilings fall among them.
small_positions = st.builds(Position, st.integers(1, 30), st.integers(1, 30))


def test_an_offset_has_one_key_order_so_spark_compares_it_as_text() -> None:
    assert json.dumps(offset_of(Position(10, 3))) == '{"tx": 10, "pos": 3}'


@given(positions)
def test_an_offset_round_trips_through_json(position: Position) -> None:
    assert position_of(json.loads(json.dumps(offset_of(position)))) == position


@pytest.mark.parametrize(
    "offset",
    [
        {"tx": 1},
        {"tx": 1, "pos": 2, "extra": 3},
        {"tx": "1", "pos": 2},
        {"tx": 1, "pos": 2.0},
        {"tx": True, "pos": 2},
        {"tx": -1, "pos": 2},
        [1, 2],
    ],
)
def test_offsets_this_source_did_not_write_are_refused(offset: object) -> None:
    with pytest.raises(OffsetError):
        position_of(offset)  # type: ignore[arg-type]


@given(positions, positions)
def test_without_a_ceiling_the_batch_ends_at_the_candidate(
    start: Position, other: Position
) -> None:
    candidate = max(start, other)
    assert next_end(start, candidate, None) == candidate


@given(positions, positions)
def test_no_safe_row_means_no_batch(start: Position, ceiling: Position) -> None:
    assert next_end(start, None, ceiling) == start


@given(positions, positions, positions)
def test_the_end_stays_between_start_and_candidate_and_under_the_ceiling(
    start: Position, other: Position, ceiling: Position
) -> None:
    candidate = max(start, other)
    end = next_end(start, candidate, ceiling)
    assert start <= end <= candidate
    assert end <= max(start, ceiling)
    if candidate <= ceiling:
        assert end == candidate


@given(
    st.lists(small_positions, min_size=0, max_size=60, unique=True).map(sorted),
    st.integers(1, 7),
    st.data(),
)
def test_available_now_batches_read_every_row_up_to_the_target_once_then_stop(
    rows: list[Position], limit: int, data: st.DataObject
) -> None:
    """Replays latestOffset as Spark drives it, with batch ends chosen as the SQL chooses."""
    # Rows committed after prepareForTriggerAvailableNow lie past the target.
    target = data.draw(st.sampled_from(rows)) if rows else START
    start, read = START, []
    for _ in range(len(rows) + 2):
        after = rows[bisect_right(rows, start) :]
        candidate = after[:limit][-1] if after else None  # spark_batch_end
        end = next_end(start, candidate, target)
        if end == start:
            break
        batch = [row for row in rows if start < row <= end]
        assert 0 < len(batch) <= limit
        read.extend(batch)
        start = end
    assert read == [row for row in rows if row <= target]
    assert start == target
