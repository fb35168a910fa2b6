"""The writer through every kind of connection: commit keeps, rollback discards, bad input
leaves the caller's transaction usable."""

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import pytest
from sqlalchemy import NullPool, create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import outbox
from outbox import InvalidMessageError, NewMessage, UnsupportedConnectionError, WriterSettingsError
from outbox.settings import writer_settings


def count_rows(url: str, publication: str = "orders") -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox.messages WHERE publication_id = %s", (publication,)
        ).fetchone()
        assert row is not None
        return int(row[0])


def alchemy_url() -> str:
    return "postgresql+psycopg://"


@contextmanager
def psycopg_transaction(url: str, commit: bool) -> Iterator[Any]:
    with psycopg.connect(url) as conn:
        yield conn
        conn.commit() if commit else conn.rollback()


@contextmanager
def alchemy_connection(url: str, commit: bool) -> Iterator[Any]:
    engine = create_engine(alchemy_url(), creator=lambda: psycopg.connect(url), poolclass=NullPool)
    with engine.connect() as conn:
        yield conn
        conn.commit() if commit else conn.rollback()
    engine.dispose()


@contextmanager
def alchemy_session(url: str, commit: bool) -> Iterator[Any]:
    engine = create_engine(alchemy_url(), creator=lambda: psycopg.connect(url), poolclass=NullPool)
    with Session(engine) as session:
        yield session
        session.commit() if commit else session.rollback()
    engine.dispose()


@asynccontextmanager
async def psycopg_async(url: str, commit: bool) -> AsyncIterator[Any]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        yield conn
        await (conn.commit() if commit else conn.rollback())


@asynccontextmanager
async def alchemy_async_connection(url: str, commit: bool) -> AsyncIterator[Any]:
    engine = create_async_engine(
        alchemy_url(),
        async_creator=lambda: psycopg.AsyncConnection.connect(url),
        poolclass=NullPool,
    )
    async with engine.connect() as conn:
        yield conn
        await (conn.commit() if commit else conn.rollback())
    await engine.dispose()


@asynccontextmanager
async def alchemy_async_session(url: str, commit: bool) -> AsyncIterator[Any]:
    engine = create_async_engine(
        alchemy_url(),
        async_creator=lambda: psycopg.AsyncConnection.connect(url),
        poolclass=NullPool,
    )
    async with AsyncSession(engine) as session:
        yield session
        await (session.commit() if commit else session.rollback())
    await engine.dispose()


SYNC_KINDS = [psycopg_transaction, alchemy_connection, alchemy_session]
ASYNC_KINDS = [psycopg_async, alchemy_async_connection, alchemy_async_session]


@pytest.mark.parametrize("kind", SYNC_KINDS)
@pytest.mark.parametrize("commit", [True, False])
def test_append_follows_the_callers_transaction(
    database_url: str, kind: Callable[..., Any], commit: bool
) -> None:
    with kind(database_url, commit) as conn:
        first = outbox.append(conn, "orders", "OrderPlaced", {"id": 1})
        batch = outbox.append_many(
            conn, "orders", [NewMessage("OrderPaid", {"id": 1}), NewMessage("OrderShipped", [1])]
        )
        assert batch[0] > first
        assert batch[1] > batch[0]
    assert count_rows(database_url) == (3 if commit else 0)


@pytest.mark.parametrize("kind", ASYNC_KINDS)
@pytest.mark.parametrize("commit", [True, False])
async def test_async_append_follows_the_callers_transaction(
    database_url: str, kind: Callable[..., Any], commit: bool
) -> None:
    async with kind(database_url, commit) as conn:
        first = await outbox.append_async(conn, "orders", "OrderPlaced", {"id": 1})
        batch = await outbox.append_many_async(
            conn, "orders", [NewMessage("OrderPaid", {"id": 1}), NewMessage("OrderShipped", {})]
        )
        assert first < batch[0] < batch[1]
    assert count_rows(database_url) == (3 if commit else 0)


def test_a_repeated_message_id_returns_the_existing_position(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        first = outbox.append(conn, "orders", "OrderPlaced", {"v": 1}, message_id="order-1")
        conn.commit()
        again = outbox.append(conn, "orders", "OrderPlaced", {"v": 2}, message_id="order-1")
        batch = outbox.append_many(
            conn,
            "orders",
            [
                NewMessage("OrderPlaced", {}, message_id="order-2"),
                NewMessage("OrderPlaced", {}, message_id="order-1"),
                NewMessage("OrderPlaced", {}, message_id="order-2"),
                NewMessage("OrderPlaced", {"without": "id"}),
            ],
        )
        conn.commit()
        stored = conn.execute(
            "SELECT data FROM outbox.messages WHERE message_id = 'order-1'"
        ).fetchone()
        fresh = conn.execute(
            "SELECT data, message_id::uuid IS NOT NULL FROM outbox.messages WHERE position = %s",
            (batch[3],),
        ).fetchone()
    assert again == first
    assert batch[1] == first
    assert batch[0] == batch[2] != first
    assert stored == ({"v": 1},)
    assert fresh == ({"without": "id"}, True)  # a message without an id in the batch: a UUID
    assert count_rows(database_url) == 3


def test_the_same_message_id_in_two_publications_is_two_messages(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        a = outbox.append(conn, "orders", "T", {}, message_id="same")
        b = outbox.append(conn, "payments", "T", {}, message_id="same")
    assert a != b


def test_fields_are_stored_as_given(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        position = outbox.append(
            conn,
            "orders",
            "OrderPlaced",
            {"amount": 10, "tags": ["a"]},
            message_id="m-1",
            partition_key="customer-7",
            headers={"trace": "abc"},
        )
        row = conn.execute(
            "SELECT publication_id, message_id, message_type, partition_key, data, headers,"
            " transaction_id = pg_current_xact_id() FROM outbox.messages WHERE position = %s",
            (position,),
        ).fetchone()
    assert row == (
        "orders",
        "m-1",
        "OrderPlaced",
        "customer-7",
        {"amount": 10, "tags": ["a"]},
        {"trace": "abc"},
        True,
    )


def nested(depth: int) -> object:
    """`depth` lists, one inside the next, built without recursion."""
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


BAD_APPENDS: list[tuple[str, dict[str, Any], str]] = [
    ("publication", {"publication": ""}, "must not be empty"),
    ("publication", {"publication": "p" * 201}, "the limit is 200"),
    ("message_type", {"message_type": ""}, "must not be empty"),
    ("message_type", {"message_type": "a\x00b"}, "\\u0000"),
    ("data", {"data": {"x": object()}}, "cannot be encoded as JSON"),
    ("data", {"data": float("nan")}, "cannot be encoded as JSON"),
    ("data.items[1].name", {"data": {"items": [{}, {"name": "a\x00"}]}}, "\\u0000"),
    ("headers", {"headers": ["not", "a", "mapping"]}, "must be a mapping"),
    ("data", {"data": "x" * 2_000_000}, "the limit is 1048576"),
    ("partition_key", {"partition_key": ""}, "must not be empty"),
    ("publication", {"publication": "ord\ud800ers"}, "lone surrogate (U+D800)"),
    ("message_type", {"message_type": "\ud800"}, "lone surrogate (U+D800)"),
    ("message_id", {"message_id": "id-\udfff"}, "lone surrogate (U+DFFF)"),
    ("partition_key", {"partition_key": "\udc80"}, "lone surrogate (U+DC80)"),
    ("data", {"data": "\ud800"}, "lone surrogate (U+D800)"),
    ("data.items[1].name", {"data": {"items": [{}, {"name": "a\ud800"}]}}, "lone surrogate"),
    ("data.ke\ud800y", {"data": {"ke\ud800y": 1}}, "lone surrogate"),
    ("headers.trace", {"headers": {"trace": "\ud800"}}, "lone surrogate"),
    ("headers.\ud800", {"headers": {"\ud800": "x"}}, "lone surrogate"),
    ("data" + "[0]" * 1000, {"data": nested(100_000)}, "nested more than 1000 levels deep"),
    ("headers.h" + "[0]" * 999, {"headers": {"h": nested(100_000)}}, "more than 1000 levels"),
    ("publication", {"publication": "   "}, "is only whitespace"),
    ("publication", {"publication": "orders\n"}, "control character (U+000A)"),
    ("publication", {"publication": "ord\u202eers"}, "format character (U+202E)"),
    ("publication", {"publication": " orders"}, "starts or ends with whitespace"),
]


@pytest.mark.parametrize(("field", "override", "reason"), BAD_APPENDS)
def test_bad_input_names_the_field_and_leaves_the_transaction_usable(
    database_url: str, field: str, override: dict[str, Any], reason: str
) -> None:
    arguments: dict[str, Any] = {
        "publication": "orders",
        "message_type": "OrderPlaced",
        "data": {"ok": True},
    }
    arguments.update(override)
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE business (id int)")
        conn.execute("INSERT INTO business VALUES (1)")
        with pytest.raises(InvalidMessageError) as refused:
            outbox.append(conn, **arguments)
        assert refused.value.field == field
        assert reason in str(refused.value)
        conn.execute("INSERT INTO business VALUES (2)")  # the transaction was not aborted
        conn.commit()
        assert conn.execute("SELECT count(*) FROM business").fetchone() == (2,)
    assert count_rows(database_url) == 0


def test_a_name_with_quotes_semicolons_and_markup_is_stored_as_given(database_url: str) -> None:
    name = 'o\'rders; [/] "v2"'
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, name, "T", {})
        conn.commit()
    assert count_rows(database_url, name) == 1


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5", ""])
def test_a_bad_payload_limit_names_the_variable_and_leaves_the_transaction_usable(
    database_url: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OUTBOX_MAX_PAYLOAD_BYTES", value)
    writer_settings.cache_clear()
    try:
        with psycopg.connect(database_url) as conn:
            with pytest.raises(WriterSettingsError) as refused:
                outbox.append(conn, "orders", "T", {})
            with pytest.raises(WriterSettingsError):
                outbox.append_many(conn, "orders", [NewMessage("T", {})])
            conn.execute("SELECT 1")  # no SQL ran: the transaction is usable
    finally:
        monkeypatch.delenv("OUTBOX_MAX_PAYLOAD_BYTES")
        writer_settings.cache_clear()
    assert isinstance(refused.value, ValueError)
    assert str(refused.value) == (
        f"OUTBOX_MAX_PAYLOAD_BYTES={value!r} is refused: expected a whole number of bytes"
        " greater than 0"
    )


def test_a_bad_message_in_a_batch_writes_none_of_it(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(InvalidMessageError) as refused:
            outbox.append_many(
                conn, "orders", [NewMessage("Ok", {}), NewMessage("Bad", {"when": {1, object()}})]
            )
        conn.commit()
    assert refused.value.field == "messages[1].data"
    assert count_rows(database_url) == 0


def test_a_sync_call_with_an_async_connection_says_which_to_use() -> None:
    class NotAConnection:
        pass

    with pytest.raises(UnsupportedConnectionError, match="NotAConnection"):
        outbox.append(NotAConnection(), "orders", "T", {})  # type: ignore[arg-type]


async def test_an_async_connection_passed_to_append_is_refused_with_a_hint(
    database_url: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        with pytest.raises(UnsupportedConnectionError, match="_async"):
            outbox.append(conn, "orders", "T", {})  # type: ignore[arg-type]


def test_an_sqlalchemy_driver_other_than_psycopg_is_refused_by_name() -> None:
    engine = create_engine("sqlite://")
    with engine.connect() as conn, pytest.raises(UnsupportedConnectionError, match="pysqlite"):
        outbox.append(conn, "orders", "T", {})


def test_notify_wakes_a_listener_at_commit(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN outbox")
        with psycopg.connect(database_url) as writer:
            outbox.append(writer, "orders", "T", {}, notify=True)
            assert list(listener.notifies(timeout=0.2)) == []  # nothing before commit
            writer.commit()
        received = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert received == ["orders"]
