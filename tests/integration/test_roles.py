"""The roles of migration 0007: each can do its job as a plain login user, and nothing more."""

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import psycopg.errors
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import outbox
import poller
from outbox import schema_migrations as migrations
from outbox.queries import QUERIES
from outbox.roles import role_names
from poller import operations
from poller.handler_requests import ParkMessage
from poller.message import Message
from poller.operations import change_shard_count
from tests.support.cli import outbox_command, outbox_environment
from tests.support.databases import PROJECT_ROOT, DatabaseFactory
from tests.support.inprocess import running_daemon
from tests.support.role_logins import login_as

ROLES = role_names()
Denied = psycopg.errors.InsufficientPrivilege


@pytest.fixture
def writer_url(database_url: str) -> Iterator[str]:
    with login_as(database_url, ROLES.writer) as url:
        yield url


@pytest.fixture
def poller_url(database_url: str) -> Iterator[str]:
    with login_as(database_url, ROLES.poller) as url:
        yield url


@pytest.fixture
def reader_url(database_url: str) -> Iterator[str]:
    with login_as(database_url, ROLES.reader) as url:
        yield url


def refused(url: str, statement: str, params: dict[str, Any] | None = None) -> bool:
    """True when PostgreSQL refuses `statement` to this user for lack of a privilege."""
    with psycopg.connect(url) as conn:
        try:
            conn.execute(statement, params)
        except Denied:
            return True
    return False


def subscribe(url: str, name: str = "sub", **settings: Any) -> None:
    with psycopg.connect(url) as conn:
        operations.create(conn, name, "orders", "start", settings)


def test_a_writer_appends_with_or_without_ids_and_a_repeat_returns_the_first_position(
    database_url: str, writer_url: str
) -> None:
    with psycopg.connect(writer_url) as conn:
        first = outbox.append(conn, "orders", "OrderPlaced", {"n": 1}, message_id="order-1")
        generated = outbox.append(conn, "orders", "OrderPlaced", {"n": 2})
        batch = outbox.append_many(
            conn,
            "orders",
            [outbox.NewMessage("A", {}), outbox.NewMessage("B", {}, message_id="order-3")],
        )
        generated_batch = outbox.append_many(conn, "orders", [outbox.NewMessage("C", {})] * 2)
    with psycopg.connect(writer_url) as conn:
        again = outbox.append(conn, "orders", "OrderPlaced", {"n": 1}, message_id="order-1")
        batch_again = outbox.append_many(
            conn, "orders", [outbox.NewMessage("B", {}, message_id="order-3")], notify=True
        )
    assert again == first
    assert batch_again == [batch[1]]
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("SELECT position FROM outbox.messages ORDER BY position").fetchall()
    assert [row[0] for row in stored] == sorted([first, generated, *batch, *generated_batch])


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("SELECT data FROM outbox.messages", id="read-data"),
        pytest.param("SELECT * FROM outbox.messages", id="read-all-columns"),
        pytest.param("SELECT headers, message_type FROM outbox.messages", id="read-headers"),
        pytest.param(
            "INSERT INTO outbox.messages"
            " (publication_id, message_id, message_type, data, transaction_id)"
            " VALUES ('orders', 'x', 'T', '{}', '3')",
            id="forge-transaction-id",
        ),
        pytest.param("DELETE FROM outbox.messages", id="delete-messages"),
        pytest.param("UPDATE outbox.messages SET data = '{}'", id="update-messages"),
        pytest.param(
            "UPDATE outbox.subscriptions SET last_processed_position = 0", id="move-checkpoint"
        ),
        pytest.param("SELECT * FROM outbox.subscriptions", id="read-subscriptions"),
        pytest.param("SELECT * FROM outbox.parked_messages", id="read-parked"),
        pytest.param("SELECT * FROM outbox.subscription_status", id="read-status"),
    ],
)
def test_a_writer_cannot_read_messages_or_touch_anything_else(
    database_url: str, writer_url: str, statement: str
) -> None:
    subscribe(database_url)
    assert refused(writer_url, statement)


def test_a_writer_cannot_take_a_lease(database_url: str, writer_url: str) -> None:
    subscribe(database_url)
    lease = {
        **{"subscription": "sub", "holder": "h", "host": "x", "pid": 1, "ttl_seconds": 60},
        **{"shard_count": 1, "shard": 0},
    }
    assert refused(writer_url, QUERIES["acquire_leadership"], lease)


def test_a_poller_delivers_parks_checkpoints_and_leads(database_url: str, poller_url: str) -> None:
    subscribe(database_url, checkpoint_after=0.05, min_checkpoint_count=1)
    with psycopg.connect(database_url) as conn:
        positions = [outbox.append(conn, "orders", "T", {"n": n}) for n in range(6)]
    poison = positions[2]
    delivered: list[int] = []
    lock = threading.Lock()

    def handle(message: Message) -> None:
        with lock:
            delivered.append(message.position)
        if message.position == poison:
            raise ParkMessage("poison")

    with running_daemon(poller_url, ["sub"], handle):
        wait_for(lambda: _checkpoint_position(database_url) == positions[-1])
        with psycopg.connect(database_url) as conn:
            lease = conn.execute(
                "SELECT l.token, a.usename FROM outbox.subscription_leaders AS l"
                " JOIN pg_stat_activity AS a ON a.application_name = l.holder"
            ).fetchone()
            parked = operations.list_parked(conn, "sub", 10)
            # A replay deletes the parked row once re-delivered: the poller's DELETE.
            operations.request_replay(conn, "sub")
        assert lease is not None
        assert lease[1] == conninfo_to_dict(poller_url)["user"]
        assert [row[0] for row in parked] == [poison]
        wait_for(lambda: delivered.count(poison) == 2)
    assert delivered[: len(positions)] == positions


def test_a_poller_leads_shards_and_ends_a_change_of_their_count(
    database_url: str, poller_url: str
) -> None:
    """Membership rows, shard checkpoints, the floor and the end of a change (its DELETE of
    the old shards' rows, its UPDATE of the change's columns) are all the poller's."""
    settings = {"checkpoint_after": 0.05, "min_checkpoint_count": 1}
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sub", "orders", "start", settings, shards=2)
        first = [outbox.append(conn, "orders", "T", {}, partition_key=f"k{n}") for n in range(8)]
    delivered: set[int] = set()

    def drained() -> bool:
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT draining_shard_count FROM outbox.subscriptions").fetchone()
            return row is not None and row[0] is None

    with running_daemon(poller_url, ["sub"], lambda message: delivered.add(message.position)):
        wait_for(lambda: delivered >= set(first))
        with psycopg.connect(database_url) as conn:
            change_shard_count(conn, "sub", 3)
            second = [
                outbox.append(conn, "orders", "T", {}, partition_key=f"k{n}") for n in range(8)
            ]
        wait_for(drained)
        wait_for(lambda: delivered >= set(second))
        wait_for(lambda: _checkpoint_position(database_url) >= min(second))
    with psycopg.connect(database_url) as conn:
        shards = conn.execute("SELECT shard_count FROM outbox.subscription_shards").fetchall()
        members = conn.execute("SELECT count(*) FROM outbox.subscription_members").fetchone()
    assert shards == [(3,)] * 3
    assert members == (0,)  # a stopped daemon leaves the group


def test_a_poller_runs_a_catch_up_subscription(database_url: str, poller_url: str) -> None:
    """Its read names the retired-up-to marks (outbox.retired_positions) as well."""
    with psycopg.connect(database_url) as conn:
        written = outbox.append(conn, "orders", "T", {})
    items = poller.subscribe_sync(poller_url, "orders")
    first = next(items)
    items.close()
    assert isinstance(first, Message)
    assert first.position == written


def test_a_poller_applies_and_clears_a_skip_request(database_url: str, poller_url: str) -> None:
    subscribe(database_url, checkpoint_after=0.05, min_checkpoint_count=1)
    with psycopg.connect(database_url) as conn:
        positions = [outbox.append(conn, "orders", "T", {"n": n}) for n in range(4)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        skip_to = conn.execute(
            "SELECT transaction_id::text || ':' || position FROM outbox.messages"
            " WHERE position = %s",
            (positions[1],),
        ).fetchone()
        assert skip_to is not None
        operations.request_skip(conn, "sub", skip_to[0])
    delivered: list[int] = []

    with running_daemon(poller_url, ["sub"], lambda message: delivered.append(message.position)):
        wait_for(lambda: _checkpoint_position(database_url) == positions[-1])

        def cleared() -> bool:
            with psycopg.connect(database_url) as conn:
                return operations.skip_request(conn, "sub") is None

        # Clearing the request is the poller's UPDATE of the skip columns.
        wait_for(cleared)
    assert delivered == positions[2:]


def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _checkpoint_position(url: str) -> int:
    with psycopg.connect(url) as conn:
        return operations.get(conn, "sub").checkpoint.position


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("DROP TABLE outbox.messages", id="drop-table"),
        pytest.param("ALTER TABLE outbox.messages ADD COLUMN x int", id="alter-table"),
        pytest.param("TRUNCATE outbox.messages", id="truncate"),
        pytest.param("DELETE FROM outbox.messages", id="delete-messages"),
        pytest.param("DROP VIEW outbox.subscription_status", id="drop-view"),
        pytest.param("CREATE TABLE outbox.extra (x int)", id="create-table"),
        pytest.param("UPDATE outbox.subscriptions SET epoch = epoch + 1", id="seek"),
        pytest.param("UPDATE outbox.subscriptions SET settings = '{}'", id="change-settings"),
        pytest.param("DELETE FROM outbox.subscriptions", id="delete-subscription"),
        pytest.param(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id)"
            " VALUES ('new', 'orders')",
            id="create-subscription",
        ),
        pytest.param(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " VALUES ('orders', 'x', 'T', '{}')",
            id="append",
        ),
    ],
)
def test_a_poller_cannot_change_the_schema_or_administer_subscriptions(
    database_url: str, poller_url: str, statement: str
) -> None:
    subscribe(database_url)
    assert refused(poller_url, statement)


def test_a_reader_sees_the_inspection_views(database_url: str, reader_url: str) -> None:
    subscribe(database_url)
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "T", {})
    with psycopg.connect(reader_url) as conn:
        status = conn.execute(
            "SELECT subscription_id, messages_behind FROM outbox.subscription_status"
        ).fetchall()
        conn.execute("SELECT * FROM outbox.blocking_transactions").fetchall()
        conn.execute("SELECT * FROM outbox.parked_messages").fetchall()
    assert status == [("sub", 1)]


@pytest.mark.parametrize(
    "statement",
    [
        pytest.param("SELECT * FROM outbox.messages", id="read-messages"),
        pytest.param(
            "INSERT INTO outbox.messages (publication_id, message_id, message_type, data)"
            " VALUES ('orders', 'x', 'T', '{}')",
            id="append",
        ),
        pytest.param("UPDATE outbox.subscriptions SET last_processed_position = 0", id="seek"),
        pytest.param("DELETE FROM outbox.parked_messages", id="purge-parked"),
        pytest.param(
            "INSERT INTO outbox.subscription_leaders"
            " (subscription_id, token, holder, host, pid, since, expires_at)"
            " VALUES ('sub', 1, 'h', 'h', 1, now(), now())",
            id="take-lease",
        ),
        pytest.param("DELETE FROM outbox.subscriptions", id="delete-subscription"),
    ],
)
def test_a_reader_cannot_write_anything(database_url: str, reader_url: str, statement: str) -> None:
    subscribe(database_url)
    assert refused(reader_url, statement)


# Cluster-wide roles, many databases --------------------------------------------------------


def _privileges(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(migrations.CATALOG_QUERIES["privilege"]).fetchall()
    return dict(rows)


def _drop_roles(server: str, prefix: str) -> None:
    names = role_names(prefix)
    with psycopg.connect(server, autocommit=True) as conn:
        for role in (names.writer, names.poller, names.reader):
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_databases_of_one_cluster_migrated_at_once_share_the_roles_and_a_downgrade_keeps_them(
    database_factory: DatabaseFactory, database_server: str
) -> None:
    prefix = f"outbox_test_{uuid.uuid4().hex[:8]}"
    names = role_names(prefix)
    urls = [database_factory.create(migrated=False) for _ in range(4)]
    try:
        # Started together, so the roles' creation races across the databases.
        migrating = [
            subprocess.Popen(
                [sys.executable, "-m", "outbox_cli", "migrate", "--role-prefix", prefix],
                env=outbox_environment(url),
                cwd=PROJECT_ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for url in urls
        ]
        outputs = [process.communicate(timeout=120)[0] for process in migrating]
        assert [process.returncode for process in migrating] == [0] * len(urls), outputs
        with psycopg.connect(database_server) as conn:
            found = conn.execute(
                "SELECT rolname, rolcanlogin FROM pg_roles WHERE rolname LIKE %s ORDER BY 1",
                [prefix + "%"],
            ).fetchall()
        assert found == sorted((role, False) for role in (names.poller, names.reader, names.writer))
        granted = _privileges(urls[0])
        assert granted[f"column messages.message_id to {names.writer}"] == "INSERT, SELECT"
        assert f"column messages.data to {names.writer}" in granted  # INSERT only
        assert granted[f"column messages.data to {names.writer}"] == "INSERT"
        assert granted[f"table messages to {names.poller}"] == "SELECT"

        migrations.downgrade(urls[0], "0004", role_prefix=prefix)
        assert not [key for key in _privileges(urls[0]) if prefix in key]
        assert _privileges(urls[1]) == granted  # the other databases keep theirs
        with psycopg.connect(database_server) as conn:
            left = conn.execute(
                "SELECT count(*) FROM pg_roles WHERE rolname LIKE %s", [prefix + "%"]
            ).fetchone()
        assert left == (3,)
        migrations.upgrade(urls[0], role_prefix=prefix)  # the roles exist: reused
        assert _privileges(urls[0]) == granted
    finally:
        for url in urls:
            database_factory.drop(url)
        _drop_roles(database_server, prefix)


def test_a_role_prefix_that_would_not_make_plain_names_is_refused() -> None:
    with pytest.raises(ValueError, match="role prefix 'Shop-1'"):
        migrations.upgrade("postgresql://unused", role_prefix="Shop-1")


def test_migrate_refuses_a_bad_role_prefix_in_one_line_and_changes_nothing(
    database_factory: DatabaseFactory,
) -> None:
    url = database_factory.create(migrated=False)
    try:
        done = outbox_command(["migrate", "--role-prefix", "Shop-EU"], url)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            "Error: role prefix 'Shop-EU' must be lower-case letters, digits and underscores,"
            " not starting with a digit, at most 56 characters"
        ]
        assert migrations.current_revision(url) is None
    finally:
        database_factory.drop(url)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("status",), id="status"),
        pytest.param(("status", "--json"), id="status-json"),
        pytest.param(("subscription", "show", "sub"), id="show"),
        pytest.param(("subscription", "list"), id="subscription-list"),
    ],
)
@pytest.mark.parametrize("role", ["reader_url", "poller_url"])
def test_a_reader_and_a_poller_run_the_inspection_commands(
    database_url: str, role: str, command: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    """The poller's login is often the one an operator has at hand on the daemon's machine."""
    subscribe(database_url)
    with psycopg.connect(database_url) as conn:
        operations.create(conn, "sharded", "orders", "start", {}, shards=3)
        outbox.append(conn, "orders", "OrderPlaced", {})  # retention's holder is named
    done = outbox_command(command, request.getfixturevalue(role))
    assert done.returncode == 0, f"outbox {' '.join(command)}:\n{done.stdout}{done.stderr}"
    assert "sub" in done.stdout


def test_a_reader_cannot_list_parked_messages_which_show_their_data(
    database_url: str, reader_url: str
) -> None:
    subscribe(database_url)
    done = outbox_command(("parked", "list", "sub"), reader_url)
    assert done.returncode == 1
    assert "permission denied for table messages" in done.stderr
