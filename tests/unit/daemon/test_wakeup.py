import pytest

from poller.daemon.term.poll_interval import AdaptiveInterval


def test_found_messages_means_read_again_at_once() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    interval.next_delay(found_messages=False, hidden_messages=False)
    assert interval.next_delay(found_messages=True, hidden_messages=False) == 0.0


def test_empty_reads_double_the_wait_up_to_the_ceiling() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    delays = [interval.next_delay(found_messages=False, hidden_messages=False) for _ in range(9)]
    assert delays == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1]


def test_hidden_rows_keep_the_wait_short() -> None:
    interval = AdaptiveInterval(0.001, 0.1, hidden_recheck=0.005)
    for _ in range(20):
        delay = interval.next_delay(found_messages=False, hidden_messages=True)
        assert delay <= 0.005
    assert delay == 0.005


def test_a_message_resets_the_backoff() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    for _ in range(10):
        interval.next_delay(found_messages=False, hidden_messages=False)
    interval.next_delay(found_messages=True, hidden_messages=False)
    assert interval.next_delay(found_messages=False, hidden_messages=False) == 0.001


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.1), (0.2, 0.1), (-1.0, 1.0)])
def test_bad_bounds_are_refused_by_value(low: float, high: float) -> None:
    with pytest.raises(ValueError, match=f"minimum={low}"):
        AdaptiveInterval(low, high)


def test_after_messages_the_wait_is_a_share_of_the_quiet_time_since() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    interval.next_delay(found_messages=True, hidden_messages=False, now=0.0)
    # Doubling alone would be 1, 2, 4, 8, 16 ms by the fifth empty read.
    waits = [
        interval.next_delay(found_messages=False, hidden_messages=False, now=quiet)
        for quiet in (0.001, 0.002, 0.003, 0.004, 0.008)
    ]
    assert waits == pytest.approx([0.001, 0.001, 0.001, 0.001, 0.002])


def test_a_long_quiet_spell_backs_off_to_the_ceiling_as_before() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    interval.next_delay(found_messages=True, hidden_messages=False, now=0.0)
    waits = [
        interval.next_delay(found_messages=False, hidden_messages=False, now=float(second))
        for second in range(1, 10)
    ]
    assert waits == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1]


def test_rows_hidden_right_after_messages_are_rechecked_at_the_shortest_wait() -> None:
    interval = AdaptiveInterval(0.001, 0.1, hidden_recheck=0.005)
    interval.next_delay(found_messages=True, hidden_messages=False, now=0.0)
    waits = [
        interval.next_delay(found_messages=False, hidden_messages=True, now=quiet / 1000)
        for quiet in range(1, 5)
    ]
    assert waits == [0.001] * 4
