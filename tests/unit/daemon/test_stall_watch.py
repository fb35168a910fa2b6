from poller.blockers import Blocker
from poller.daemon.term.stall import StallWatch


def test_no_warning_before_the_threshold_then_one_then_a_low_rate() -> None:
    watch = StallWatch(threshold=5.0, repeat_every=60.0)
    assert not watch.observe(100.0, hidden=True)
    assert not watch.observe(104.9, hidden=True)
    assert watch.observe(105.0, hidden=True)
    assert not watch.observe(106.0, hidden=True)
    assert not watch.observe(164.9, hidden=True)
    assert watch.observe(165.0, hidden=True)


def test_the_clock_restarts_when_nothing_is_hidden() -> None:
    watch = StallWatch(threshold=5.0)
    watch.observe(0.0, hidden=True)
    assert not watch.observe(4.0, hidden=False)
    assert not watch.observe(8.0, hidden=True)
    assert watch.waited(9.0) == 1.0
    assert watch.observe(13.0, hidden=True)


def test_a_blocker_is_described_with_who_holds_it_never_its_sql() -> None:
    blocker = Blocker(
        "session",
        4242,
        "billing",
        "app",
        "psql",
        "10.0.0.7",
        "idle in transaction",
        12.5,
        "ALTER ROLE app PASSWORD 'hunter2'",  # read only when an operator asks for it
    )
    assert blocker.describe() == (
        "session pid 4242 (database billing, user app, application 'psql', client 10.0.0.7,"
        " state idle in transaction, in transaction for 12.5 s)"
    )


def test_a_prepared_transaction_is_named_by_its_gid() -> None:
    blocker = Blocker("prepared transaction", None, "db", "app", "tx-1", None, "prepared", 3, None)
    assert "gid 'tx-1'" in blocker.describe()


def test_hidden_rows_of_newer_transactions_each_time_are_no_stall() -> None:
    """Under writers that never stop, every empty read found some committed rows behind the
    frontier, each time of newer transactions: the frontier moved, nothing waited long, yet
    after 5 s the daemon warned that messages had waited 5 s, held back by none found."""
    watch = StallWatch(threshold=5.0)
    for step in range(100):
        assert not watch.observe(step * 0.1, hidden=True, oldest=1000 + step)
    assert not watch.observe(12.0, hidden=True, oldest=2000)
    assert watch.observe(17.0, hidden=True, oldest=2000)  # the same one, 5 s on
    assert watch.waited(17.0) == 5.0
