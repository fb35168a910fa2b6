import pytest

from outbox.positions import MAX_PART, Position


def test_positions_compare_as_numbers_not_text() -> None:
    assert Position(999, 5) < Position(1000, 1)


def test_a_position_round_trips_through_text() -> None:
    assert Position.parse(str(Position(123, 45))) == Position(123, 45)


def test_the_largest_bigint_parts_are_accepted() -> None:
    assert Position.parse(f"{MAX_PART}:{MAX_PART}") == Position(MAX_PART, MAX_PART)


@pytest.mark.parametrize("text", ["", "12", "1:2:3", "a:1", "-1:2", "1:", "\u00b2:1", "1:\u0661"])
def test_malformed_positions_name_the_value(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        Position.parse(text)


@pytest.mark.parametrize("text", [f"{2**63}:1", f"1:{2**63}", "99999999999999999999:1"])
def test_positions_that_do_not_fit_a_bigint_are_refused(text: str) -> None:
    # PostgreSQL would clamp or overflow them: the subscription would never receive again.
    with pytest.raises(ValueError, match="out of range"):
        Position.parse(text)
