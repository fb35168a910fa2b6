import pytest

from poller.positions import Position


def test_positions_compare_as_numbers_not_text() -> None:
    assert Position(999, 5) < Position(1000, 1)


def test_a_position_round_trips_through_text() -> None:
    assert Position.parse(str(Position(123, 45))) == Position(123, 45)


@pytest.mark.parametrize("text", ["", "12", "1:2:3", "a:1", "-1:2", "1:"])
def test_malformed_positions_name_the_value(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        Position.parse(text)
