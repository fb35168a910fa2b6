import pytest

from outbox.queries import QUERIES, parse_queries


def test_blocks_are_split_by_name_without_their_comments() -> None:
    parsed = parse_queries("-- one --\n-- says one\nSELECT 1\n\n-- two --\n-- says two\nSELECT 2\n")
    assert parsed == {"one": "SELECT 1", "two": "SELECT 2"}


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="'one' is defined twice"):
        parse_queries("-- one --\nSELECT 1\n-- one --\nSELECT 2\n")


def test_the_poll_query_reads_below_the_snapshot_xmin_in_delivery_order() -> None:
    query = QUERIES["read_batch"]
    assert "pg_snapshot_xmin(pg_current_snapshot())" in query
    # Qualified, so the ORDER BY does not sort the text alias of transaction_id.
    assert "ORDER BY m.transaction_id, m.position" in query


def test_a_fragment_is_included_where_a_block_names_it() -> None:
    parsed = parse_queries("-- one --\nSELECT {{columns}} FROM t\n", {"columns": "a, b"})
    assert parsed == {"one": "SELECT a, b FROM t"}


def test_an_unknown_fragment_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'one' includes \{\{nope\}\}"):
        parse_queries("-- one --\nSELECT {{nope}}\n", {})


def test_every_message_read_shares_the_message_columns() -> None:
    for name in ("read_batch", "read_parked_messages"):
        assert "m.data::text AS data, m.headers::text AS headers" in QUERIES[name]
        assert "{{" not in QUERIES[name]
