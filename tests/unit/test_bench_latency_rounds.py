from bench.latency_rounds import Breakdown, breakdowns, frontier_passed


def test_a_row_passes_the_frontier_when_every_lower_transaction_has_committed() -> None:
    # "b" (transaction 2) commits first, but "a" (transaction 1) holds it until 5.0.
    committed = {"a": 5.0, "b": 1.0, "c": 6.0}
    ids = {"a": 1, "b": 2, "c": 3, "probe": 0}
    assert frontier_passed(committed, ids) == {"a": 5.0, "b": 5.0, "c": 6.0}


def test_each_message_splits_into_frontier_read_and_handler_waits() -> None:
    committed = {"a": 5.0, "b": 1.0}
    ids = {"a": 1, "b": 2}
    read_at = {"a": 7.0, "b": 7.0}
    handled_at = {"a": 7.5, "b": 8.0}
    assert sorted(breakdowns(committed, ids, read_at, handled_at), key=lambda p: p.total) == [
        Breakdown(0.0, 2.0, 0.5),
        Breakdown(4.0, 2.0, 1.0),
    ]
