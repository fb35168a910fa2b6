"""Where a catch-up subscription's backlog ends: past every transaction that committed before
it subscribed, not past those still running at the top."""

from poller.catch_up.stream import backlog_end


def test_nothing_running_ends_at_the_next_id() -> None:
    assert backlog_end(100, []) == 100


def test_the_newest_running_ids_are_left_out() -> None:
    assert backlog_end(100, [97, 98, 99]) == 97


def test_an_older_running_id_below_a_committed_one_is_inside() -> None:
    # 95 runs, 96 committed: 96's rows are read only once 95 ends, and they are backlog.
    assert backlog_end(100, [95, 99]) == 99
