import pytest

from poller.daemon.term.poll_interval import AdaptiveInterval


def test_a_read_cut_by_its_row_limit_means_read_again_at_once() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    interval.next_delay(found_messages=False, hidden_messages=False, more=False)
    assert interval.next_delay(found_messages=True, hidden_messages=False, more=True) == 0.0


def test_a_read_that_found_messages_up_to_the_frontier_waits_the_minimum() -> None:
    """Read again at once, it found something only if a commit passed the frontier during its
    round trip; most often it was an empty read and a question about hidden rows: two
    statements, where a bare loop reading every millisecond sends none."""
    interval = AdaptiveInterval(0.001, 0.1)
    for _ in range(5):
        assert interval.next_delay(found_messages=True, hidden_messages=False, more=False) == 0.001


def test_empty_reads_double_the_wait_up_to_the_ceiling() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    delays = [
        interval.next_delay(found_messages=False, hidden_messages=False, more=False)
        for _ in range(9)
    ]
    assert delays == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1]


def test_hidden_rows_keep_the_wait_short() -> None:
    interval = AdaptiveInterval(0.001, 0.1, hidden_recheck=0.005)
    for _ in range(20):
        delay = interval.next_delay(found_messages=False, hidden_messages=True, more=False)
        assert delay <= 0.005
    assert delay == 0.005


def test_a_message_resets_the_backoff() -> None:
    interval = AdaptiveInterval(0.001, 0.1)
    for _ in range(10):
        interval.next_delay(found_messages=False, hidden_messages=False, more=False)
    interval.next_delay(found_messages=True, hidden_messages=False, more=False)
    assert interval.next_delay(found_messages=False, hidden_messages=False, more=False) == 0.001


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.1), (0.2, 0.1), (-1.0, 1.0)])
def test_bad_bounds_are_refused_by_value(low: float, high: float) -> None:
    with pytest.raises(ValueError, match=f"minimum={low}"):
        AdaptiveInterval(low, high)
