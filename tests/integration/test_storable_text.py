"""PostgreSQL itself accepts what storable_text makes of hostile text, and gives it back."""

from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import TupleRow

from outbox.storable_text import storable_text

Conn = psycopg.Connection[TupleRow]

HOSTILE = [
    "\x00",
    "before\x00after",
    "\ud800",  # a lone high surrogate
    "\udfff\udc80",  # lone lows, as surrogateescape leaves undecodable bytes
    "\ud83d\ude00 a pair, \ude00\ud83d reversed",
    "\x00" * 5000 + "\ud800" * 5000,
    "é" * 100_000,
    "\ufffe\uffff\U0010ffff",  # noncharacters are still valid UTF-8
    "\u202eoverride\x1b[2J\r\n\t",
    "",
]


@pytest.fixture
def conn(database_url: str) -> Iterator[Conn]:
    with psycopg.connect(database_url) as connection:
        connection.execute("CREATE TEMPORARY TABLE notes (body text NOT NULL)")
        yield connection


def round_trip(conn: Conn, text: str) -> None:
    stored = storable_text(text)
    conn.execute("INSERT INTO notes (body) VALUES (%s)", (stored,))
    # DELETE ... RETURNING reads the row back and leaves the table empty for the next text.
    assert conn.execute("DELETE FROM notes RETURNING body").fetchall() == [(stored,)]


@pytest.mark.parametrize("text", HOSTILE)
def test_postgresql_stores_hostile_text_once_made_storable(conn: Conn, text: str) -> None:
    round_trip(conn, text)


# The connection outlives the examples on purpose: each example leaves the table empty.
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    # A list joined, not st.text(), which would almost never pick the few troublesome ones.
    st.lists(
        st.one_of(
            st.characters(exclude_categories=()),  # every code point, surrogates too
            st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ude00"]),
        ),
        max_size=3000,
    ).map("".join)
)
def test_postgresql_stores_any_text_once_made_storable(conn: Conn, text: str) -> None:
    round_trip(conn, text)
