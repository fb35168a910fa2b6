"""Reading messages from a hot standby (DaemonOptions.read_database_url): a real primary and a
streaming-replication standby (tests/support/replica_pair.py), the daemon reading from the
standby while its leases, checkpoints and parked rows go to the primary.

The rule holds there (outbox/read_servers.py says why): 16 out-of-order writers with long,
rolled-back and subtransaction-heavy transactions lose nothing and reorder nothing. A standby
behind the stored checkpoint is waited for, said, and never read around. A server that is not
a standby of the primary (a promoted one) is refused, and the test shows what reading there
would skip.
"""

import contextlib
import dataclasses
import json
import logging
import threading
from collections import Counter, defaultdict
from typing import Any

import psycopg
import pytest

import outbox
from outbox.positions import Position
from outbox.read_servers import server_state
from poller import operations
from poller.daemon.background import DaemonThread
from poller.message import Message
from poller.store.message_reads import read_batch
from tests.support.cli import outbox_command
from tests.support.daemons import HANDLER, wait_until
from tests.support.inprocess import FAST
from tests.support.metrics_scrape import free_port, scrape, value
from tests.support.replica_pair import ReplicaPair
from tests.support.snapshot_writers import WriterMix, run_mixed_writers
from tests.support.stored import stored_checkpoint
from tests.support.writers import append_committed


class Recorder:
    """A handler keeping every message it is handed, in the order it was handed them."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        with self._lock:
            self.messages.append(message)

    def delivered(self) -> list[Message]:
        with self._lock:
            return list(self.messages)

    def positions(self, publication: str | None = None) -> set[int]:
        return {
            m.position
            for m in self.delivered()
            if publication is None or m.publication == publication
        }


def reading_from(url: str) -> Any:
    return dataclasses.replace(FAST, read_database_url=url)


def test_a_daemon_reading_a_hot_standby_loses_and_reorders_nothing(
    replica_pair: ReplicaPair,
) -> None:
    primary, standby = replica_pair.migrated_database("standby_rule")
    with psycopg.connect(primary, autocommit=True) as conn:
        operations.create(conn, "ordered", "mixed", "start", {})
        operations.create(conn, "keyed", "mixed", "start", {"consumers": 4, "strategy": "pinned"})
    ordered, keyed = Recorder(), Recorder()
    options = reading_from(standby)
    with (
        DaemonThread(primary, ["ordered"], ordered, options),
        DaemonThread(primary, ["keyed"], keyed, options),
    ):
        written = run_mixed_writers(primary, "mixed", WriterMix())
        wait_until(
            lambda: (
                ordered.positions() >= written.committed and keyed.positions() >= written.committed
            ),
            30,
            "every committed message, from the standby",
        )
        readers = _daemon_sessions(standby, "standby_rule")
    assert written.committed
    assert written.rolled_back
    # Both daemons read on the standby (their leases and writes are on the primary).
    assert readers >= 2, f"{readers} daemon sessions on the standby"
    for recorder in (ordered, keyed):
        delivered = recorder.delivered()
        positions = [m.position for m in delivered]
        assert len(positions) == len(set(positions)), "delivered twice without a fault"
        assert set(positions) == written.committed, "lost or invented a message"
    # One consumer: every message in (transaction_id, position) order, as the reader read.
    order = [m.at for m in ordered.delivered()]
    assert order == sorted(order), "delivered out of the snapshot-safe order"
    # Four pinned consumers: each key's messages in that order.
    by_key: dict[str | None, list[Position]] = defaultdict(list)
    for message in keyed.delivered():
        by_key[message.partition_key].append(message.at)
    for key, places in by_key.items():
        assert places == sorted(places), f"key {key} reordered"
    # The final checkpoints went to the primary.
    assert stored_checkpoint(primary, "ordered") == order[-1]


def test_a_standby_behind_the_stored_checkpoint_is_waited_for_and_never_read_around(
    replica_pair: ReplicaPair, caplog: pytest.LogCaptureFixture
) -> None:
    primary, standby = replica_pair.migrated_database("standby_behind")
    with psycopg.connect(primary, autocommit=True) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "keys", "start", {}, shards=2)
    caplog.set_level(logging.INFO, logger="poller.daemon.term.replica_watch")
    options = dataclasses.replace(reading_from(standby), stall_threshold=0.5)
    later = Recorder()
    # The daemon reading the standby outlives the pause: it reads on once replay resumes.
    with contextlib.ExitStack() as running:
        with replica_pair.replay_paused():
            # Delivered from the primary: the stored checkpoints pass what the standby has.
            first = set(append_committed(primary, "orders", 20)) | set(_keyed(primary, 20))
            earlier = Recorder()
            with DaemonThread(primary, ["plain", "sharded"], earlier, FAST):
                wait_until(lambda: earlier.positions() >= first, 30, "the first messages")
            stored = _checkpoints(primary)
            running.enter_context(DaemonThread(primary, ["plain", "sharded"], later, options))
            second = set(append_committed(primary, "orders", 20)) | set(_keyed(primary, 20))
            wait_until(
                lambda: {"plain", "sharded"} <= _warned_about(caplog),
                30,
                "the warning that the standby is behind",
            )
            warning = next(r for r in caplog.records if r.levelno == logging.WARNING)
            assert "bytes of WAL behind the primary" in warning.getMessage()
            assert "nothing is skipped" in warning.getMessage()
            # Nothing read, nothing moved: not the plain checkpoint, not a quiet shard's.
            assert not later.delivered()
            assert _checkpoints(primary) == stored
        wait_until(lambda: later.positions() >= second, 30, "the later messages")
        wait_until(lambda: _said_caught_up(caplog), 30, "that the standby caught up")
    assert later.positions() == second, "read around the checkpoint, or skipped"


def test_a_promoted_standby_is_refused_for_what_reading_it_would_skip(
    replica_pair: ReplicaPair, caplog: pytest.LogCaptureFixture
) -> None:
    primary, _ = replica_pair.migrated_database("standby_promoted")
    with psycopg.connect(primary, autocommit=True) as conn:
        operations.create(conn, "plain", "orders", "start", {})
    caplog.set_level(logging.INFO, logger="poller.daemon")
    recorder = Recorder()
    with replica_pair.another_standby("promoted") as server:
        copy = server.url("standby_promoted")
        with DaemonThread(primary, ["plain"], recorder, reading_from(copy)):
            first = set(append_committed(primary, "orders", 10))
            wait_until(lambda: recorder.positions() >= first, 30, "delivery from the standby")
            with psycopg.connect(copy, autocommit=True) as conn:
                conn.execute("SELECT pg_promote()")  # waits until it is done
            wait_until(lambda: _refused(caplog), 30, "the daemon to refuse the promoted copy")
            # A split brain: the primary still takes writes, which the copy never sees...
            with psycopg.connect(primary) as conn:
                missed = {outbox.append(conn, "orders", "Missed", {}, message_id=f"missed-{n}")
                          for n in range(5)}  # fmt: skip
            checkpoint = stored_checkpoint(primary, "plain")
            delivered = max(m.at for m in recorder.delivered())
            with psycopg.connect(primary, autocommit=True) as conn:
                highest_missed = max(m.transaction_id for m in _read_after(conn, delivered))
            # ...while its own transactions carry its safe frontier past them.
            with psycopg.connect(copy, autocommit=True) as conn:
                with conn.transaction():
                    outbox.append(conn, "orders", "SplitBrain", {}, message_id="copy-only")
                while server_state(conn).frontier <= highest_missed:
                    conn.execute("SELECT pg_current_xact_id()")  # one transaction each
                frontier = server_state(conn).frontier
                read_there = _read_after(conn, delivered)
            # What reading the copy would do: its frontier is past the missed messages, so a
            # reader there would pass their place without them and move its checkpoint on.
            assert frontier > highest_missed
            assert [m.message_id for m in read_there] == ["copy-only"]
            # The daemon read nothing more: not the copy's message, not around the missed.
            assert recorder.positions() == first
            assert stored_checkpoint(primary, "plain") == checkpoint
        started = outbox_command(
            ["poll", "--subscription", "plain", "--handler", HANDLER, "--read-database-url", copy],
            primary,
        )
    assert started.returncode == 2, started.stderr
    assert "not in recovery, and it is not the primary" in started.stderr
    assert len(started.stderr.strip().splitlines()) == 1, started.stderr
    assert missed


def test_a_standby_promoted_while_a_transaction_is_open_on_the_primary_moves_nothing_past_it(
    replica_pair: ReplicaPair, caplog: pytest.LogCaptureFixture
) -> None:
    """Transaction X is open on the primary; Y, after it, has committed and been replayed. The
    standby's frontier holds at X until the standby is promoted: the copy then counts X as
    ended (it will never see X's commit), its frontier jumps past Y, and a read there would
    deliver Y, and move X's quiet shard's checkpoint to Y, past X. Every read proves in its
    own statement that the server is still a standby: the first read on the promoted copy is
    refused, nothing moves, and X is delivered once the daemon reads the primary."""
    primary, _ = replica_pair.migrated_database("standby_promoted_open")
    with psycopg.connect(primary, autocommit=True) as conn:
        operations.create(conn, "plain", "orders", "start", {})
        operations.create(conn, "sharded", "orders", "start", {}, shards=2)
        key_of = {
            shard: next(
                key for key in (f"key-{n}" for n in range(100)) if _shard_of(conn, key, 2) == shard
            )
            for shard in (0, 1)
        }
    caplog.set_level(logging.INFO, logger="poller.daemon")
    plain, sharded = Recorder(), Recorder()
    with replica_pair.another_standby("promoted_open") as server:
        copy = server.url("standby_promoted_open")
        # The replica watch looks at most once a renew_every: 0.5 s here, so it would rarely
        # notice the promotion before the next read does (reads come every 5 ms while rows
        # wait behind X).
        options = dataclasses.replace(FAST, renew_every=0.5, read_database_url=copy)
        with psycopg.connect(primary) as open_x:
            with (
                DaemonThread(primary, ["plain"], plain, options),
                DaemonThread(primary, ["sharded"], sharded, options),
            ):
                first = set(append_committed(primary, "orders", 4))
                wait_until(
                    lambda: plain.positions() >= first and sharded.positions() >= first,
                    30,
                    "delivery from the standby",
                )
                x = outbox.append(open_x, "orders", "X", {}, partition_key=key_of[0])
                x_transaction = _transaction_id(open_x)
                # Of the other shard: X's shard has nothing after X but X, so it is quiet.
                with psycopg.connect(primary) as conn:
                    y = outbox.append(conn, "orders", "Y", {}, partition_key=key_of[1])
                replica_pair.wait_replayed(standby=server)
                with psycopg.connect(copy, autocommit=True) as conn:
                    conn.execute("SELECT pg_promote()")  # waits until it is done
                    with conn.transaction():
                        outbox.append(conn, "orders", "CopyOnly", {}, partition_key=key_of[1])
                wait_until(
                    lambda: (
                        _refused_workers(caplog) >= 3
                        or _past(plain, x_transaction)
                        or _past(sharded, x_transaction)
                    ),
                    30,
                    "each worker to refuse the promoted copy, or a delivery past X",
                )
            # Stopped: every term has written its last checkpoint.
            assert not _moved_past(primary, x_transaction), (
                f"a checkpoint moved past the open transaction {x_transaction}:"
                f" {_checkpoints(primary)}"
            )
            for recorder in (plain, sharded):
                assert not _past(recorder, x_transaction), "delivered past the open transaction"
            open_x.commit()
        on_primary = Recorder()
        with DaemonThread(primary, ["plain", "sharded"], on_primary, FAST):
            wait_until(
                lambda: _handed(on_primary, {x, y}) == 2,
                30,
                "X and Y, from the primary, to both subscriptions",
            )
    delivered = plain.delivered() + sharded.delivered() + on_primary.delivered()
    assert not any(m.message_type == "CopyOnly" for m in delivered)


def test_a_server_of_another_cluster_is_refused_at_start(
    replica_pair: ReplicaPair, database_url: str
) -> None:
    primary, _ = replica_pair.migrated_database("standby_other_cluster")
    with psycopg.connect(primary, autocommit=True) as conn:
        operations.create(conn, "plain", "orders", "start", {})
    other = psycopg.conninfo.make_conninfo(database_url, password="secret-word")
    started = outbox_command(
        ["relay", "--subscription", "plain", "--to", "nats://127.0.0.1:4222?subject=x"],
        primary,
        OUTBOX_READ_DATABASE_URL=other,
    )
    assert started.returncode == 2, started.stderr
    assert "is not a copy of the primary's cluster" in started.stderr
    assert "secret-word" not in started.stderr
    assert len(started.stderr.strip().splitlines()) == 1, started.stderr


def test_status_the_console_and_metrics_show_the_lag_and_who_waits_for_the_standby(
    replica_pair: ReplicaPair,
) -> None:
    primary, standby = replica_pair.migrated_database("standby_status")
    with psycopg.connect(primary, autocommit=True) as conn:
        operations.create(conn, "ahead", "orders", "start", {})
        operations.create(conn, "idle", "quiet", "start", {})
    port = free_port()
    options = dataclasses.replace(reading_from(standby), metrics_port=port)
    with replica_pair.replay_paused():
        first = set(append_committed(primary, "orders", 5))
        earlier = Recorder()
        with DaemonThread(primary, ["ahead"], earlier, FAST):
            wait_until(lambda: earlier.positions() >= first, 30, "delivery from the primary")
        with DaemonThread(primary, ["ahead", "idle"], Recorder(), options):
            series = scrape(port)
        document = _status_json(primary, "--read-database-url", standby)
        printed = outbox_command(["status"], primary, OUTBOX_READ_DATABASE_URL=standby)
        page = _console_overview(primary, standby)
    assert value(series, "outbox_read_replica_up") == 1
    assert value(series, "outbox_read_replica_waiting", subscription="ahead") == 1
    assert value(series, "outbox_read_replica_waiting", subscription="idle") == 0
    assert (value(series, "outbox_read_replica_lag_bytes") or 0) > 0
    assert (value(series, "outbox_read_replica_lag_seconds") or 0) > 0
    ahead, idle = document["ahead"]["read_replica"], document["idle"]["read_replica"]
    assert ahead["waiting"] is True
    assert idle["waiting"] is False
    assert ahead["problem"] is None
    assert ahead["lag_bytes"] > 0
    assert printed.returncode == 0, printed.stderr
    assert "ahead: the read replica has not replayed up to its checkpoint" in printed.stdout
    assert "bytes of WAL behind the primary" in printed.stdout
    assert "Read replica" in page
    assert "bytes of WAL behind the primary" in page
    assert "ahead: the read replica has not replayed up to its checkpoint" in page
    assert "idle: the read replica" not in page
    replica_pair.wait_replayed()
    caught_up = _status_json(primary, "--read-database-url", standby)["ahead"]["read_replica"]
    assert caught_up["waiting"] is False
    assert _status_json(primary)["ahead"]["read_replica"] is None


def _console_overview(url: str, read_url: str) -> str:
    """The console's live overview, once its sampler has read the database and the replica."""
    from starlette.testclient import TestClient

    from outbox_console.app import create_app
    from outbox_console.config import ConsoleConfig

    config = ConsoleConfig(url, sample_interval=60, read_database_url=read_url)
    with TestClient(create_app(config), base_url="http://127.0.0.1") as client:

        def sampled() -> str | None:
            text = client.get("/live").text
            return text if "Read replica" in text else None

        return wait_until(sampled, 30, "the console's first sample")


def _status_json(url: str, *arguments: str) -> dict[str, Any]:
    done = outbox_command(["status", "--json", *arguments], url)
    assert done.returncode == 0, done.stderr
    return {row["subscription"]: row for row in json.loads(done.stdout)}


def _refused(caplog: pytest.LogCaptureFixture) -> bool:
    return any(
        record.levelno == logging.ERROR and "not in recovery" in record.getMessage()
        for record in caplog.records
    )


def _refused_workers(caplog: pytest.LogCaptureFixture) -> int:
    """How many workers (a plain subscription's, each shard's) logged a refused read server."""
    return len(
        {
            record.getMessage().split(":", 1)[0]
            for record in caplog.records
            if record.levelno == logging.ERROR and "not in recovery" in record.getMessage()
        }
    )


def _handed(recorder: Recorder, positions: set[int]) -> int:
    """How many times each of `positions` was handed over, at least (one daemon runs two
    subscriptions of one publication: 2 when both had every one)."""
    counts = Counter(m.position for m in recorder.delivered() if m.position in positions)
    return min((counts[position] for position in positions), default=0)


def _moved_past(url: str, transaction_id: int) -> bool:
    """Whether a subscription's or a shard's checkpoint is at or past `transaction_id`."""
    return any(int(row[-2]) >= transaction_id for row in _checkpoints(url))


def _past(recorder: Recorder, transaction_id: int) -> bool:
    return any(m.transaction_id >= transaction_id for m in recorder.delivered())


def _shard_of(conn: psycopg.Connection[Any], key: str, shard_count: int) -> int:
    row = conn.execute("SELECT outbox.message_shard(%s, 0, %s)", (key, shard_count)).fetchone()
    assert row is not None
    return int(row[0])


def _transaction_id(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


def _keyed(url: str, count: int) -> list[int]:
    """`count` messages of "keys", on keys spread over both shards of "sharded"."""
    with psycopg.connect(url) as conn:
        return [
            outbox.append(conn, "keys", "Keyed", {"n": n}, partition_key=f"key-{n}")
            for n in range(count)
        ]


def _checkpoints(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        subscriptions = conn.execute(
            "SELECT subscription_id, last_processed_transaction_id::text,"
            " last_processed_position FROM outbox.subscriptions ORDER BY 1"
        ).fetchall()
        shards = conn.execute(
            "SELECT subscription_id, shard, last_processed_transaction_id::text,"
            " last_processed_position FROM outbox.subscription_shards ORDER BY 1, 2"
        ).fetchall()
    return subscriptions + shards


def _warned_about(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {
        str(record.args[0])
        for record in caplog.records
        if record.levelno == logging.WARNING and isinstance(record.args, tuple)
    }


def _said_caught_up(caplog: pytest.LogCaptureFixture) -> bool:
    return any("has replayed past" in record.getMessage() for record in caplog.records)


def _daemon_sessions(url: str, database: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = %s AND application_name LIKE 'outbox-poller:%%'",
            (database,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _read_after(conn: psycopg.Connection[Any], after: Position) -> list[Message]:
    """The snapshot-safe read of "orders" after `after`, on `conn`'s server."""
    return read_batch(conn, "orders", after, 1000)
