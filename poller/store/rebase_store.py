"""`outbox rebase`: renumber stored transaction ids after a restore into another cluster.

Every stored id is rewritten, in one transaction, to consecutive ids just below the rebase's
own transaction id, so each is readable as soon as the transactions older than the rebase end:
- ids restored from the dump first (messages, checkpoints, shard checkpoints and barriers,
  parked rows, consumer positions and any other xid8 column of the outbox), in their old
  order, so every comparison between a message and a checkpoint comes out as before: nothing
  delivered is delivered again, nothing behind a checkpoint moves ahead of it;
- then the ids of messages written in this cluster after the restore, in their order: they
  are newer than everything restored, so they follow it, after every checkpoint.
Messages written here are told apart from restored ones by the row's xmin (see the
rebase_last_restored_position query). Once the counter has passed every restored id there is
nothing to rewrite, and messages written here before it did are refused, not guessed at (see
docs/explanation/roles-and-restores.md). Writers wait while it runs (the
tables are locked for writing), and it refuses to run while a daemon leads a subscription.
When the cluster has assigned fewer ids than the rewrite needs, it first uses up enough.
"""

import logging
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from outbox.archive import catalog as archive_catalog
from poller.store.restore_check import RESTORE_QUERIES

log = logging.getLogger(__name__)

# The tables whose writers a rebase holds back, besides those with a stored id column.
_LOCKED_TABLES = ("messages", "subscriptions", "subscription_leaders", "parked_messages")
# 0, 1 and 2 are no transaction's id (invalid, bootstrap, frozen); rewritten ids start above.
_FIRST_NORMAL_TRANSACTION_ID = 3
# Ids used up beyond the bare need, for the transactions that start meanwhile.
_ADVANCE_MARGIN = 1000
_ATTEMPTS = 3


class RebaseRefusedError(Exception):
    """The rebase changed nothing; the message says why."""


@dataclass(frozen=True)
class RebaseResult:
    restored_ids: int
    written_here_ids: int
    messages_rewritten: int
    first_id: int
    advanced_by: int


def rebase(conn: psycopg.Connection[Any]) -> RebaseResult | None:
    """Rebase the outbox on `conn` (an autocommit connection); None when no stored id is
    ahead of the cluster, which leaves everything as it was."""
    advanced = 0
    for _ in range(_ATTEMPTS):
        with conn.transaction():
            result = _rewrite(conn, advanced)
        if isinstance(result, RebaseResult) or result is None:
            return result
        log.info("using up %d transaction ids to make room below the counter", result)
        _advance_transaction_ids(conn, result)
        advanced += result
    raise RebaseRefusedError(
        "other transactions kept using up the room made for the rewritten ids; run it again"
    )


def _rewrite(conn: psycopg.Connection[Any], advanced: int) -> RebaseResult | int | None:
    """The rewrite in the caller's transaction; or how many ids to use up first."""
    columns = [tuple(row) for row in conn.execute(RESTORE_QUERIES["rebase_xid_columns"])]
    for table in dict.fromkeys((*_LOCKED_TABLES, *(table for table, _ in columns))):
        conn.execute(_composed("rebase_lock_table", table=sql.Identifier("outbox", table)))
    leaders = conn.execute(RESTORE_QUERIES["rebase_live_leaders"]).fetchall()
    if leaders:
        named = ", ".join(
            f"{name!r}{_shard_text(count, shard)} (pid {pid} on {host})"
            for name, count, shard, host, pid in leaders
        )
        raise RebaseRefusedError(f"a daemon leads {named}: stop every daemon, then rebase")
    last_restored = _scalar(conn, RESTORE_QUERIES["rebase_last_restored_position"])
    conn.execute(RESTORE_QUERIES["rebase_create_map"])
    conn.execute(RESTORE_QUERIES["rebase_collect_messages"], {"last_restored": last_restored})
    for table, column in columns:
        identifiers = {"table": sql.Identifier("outbox", table), "column": sql.Identifier(column)}
        conn.execute(_composed("rebase_collect_column", **identifiers))
    plan = conn.execute(RESTORE_QUERIES["rebase_plan"]).fetchone()
    assert plan is not None  # an aggregate always returns its row
    ids, restored, highest_restored, own_id = plan
    if highest_restored < own_id:
        # Nothing from another cluster's future: not a restore, rebased already, or the
        # counter has passed every restored id, which is fine unless messages were written here
        # before it did.
        _refuse_messages_written_among_restored(conn, last_restored)
        return None
    _refuse_archives(conn)
    base = own_id - ids
    if base < _FIRST_NORMAL_TRANSACTION_ID:
        return int(_FIRST_NORMAL_TRANSACTION_ID - base + _ADVANCE_MARGIN)
    conn.execute(RESTORE_QUERIES["rebase_assign"], {"base": base})
    rewritten = _scalar(conn, RESTORE_QUERIES["rebase_messages"], last_restored=last_restored)
    for table, column in columns:
        identifiers = {"table": sql.Identifier("outbox", table), "column": sql.Identifier(column)}
        conn.execute(_composed("rebase_column", **identifiers))
    conn.execute(RESTORE_QUERIES["rebase_raise_epochs"])
    return RebaseResult(restored, ids - restored, rewritten, base, advanced)


def _refuse_archives(conn: psycopg.Connection[Any]) -> None:
    """An archive's Parquet files hold the other cluster's ids, which a rewrite of the tables
    cannot reach: its ranges, renumbered, would no longer match the rows in its files."""
    archived = [archive.publication for archive in archive_catalog.list_archives(conn)]
    if archived:
        raise RebaseRefusedError(
            f"{', '.join(map(repr, archived))} archived to the lake: the archive's files keep"
            " the old cluster's transaction ids, which a rebase cannot rewrite. Copy the files"
            " elsewhere to keep that history, delete each archive (`outbox archive delete"
            " --publication P`), rebase, then archive anew"
        )


def _shard_text(shard_count: int, shard: int) -> str:
    """A sharded subscription's leaders are one per shard: name which."""
    return "" if shard_count == 1 else f" shard {shard}/{shard_count}"


def _refuse_messages_written_among_restored(
    conn: psycopg.Connection[Any], last_restored: int
) -> None:
    """Once the counter has passed the restored ids, a daemon no longer refuses to deliver, so
    the messages written here before then may have been delivered in the mixed order already,
    or passed over: a rewrite could repeat the ones and cannot know the others. Refuse, saying
    which messages and which subscriptions."""
    rows = conn.execute(
        RESTORE_QUERIES["rebase_written_here_among_restored"], {"last_restored": last_restored}
    ).fetchall()
    _, count, first, last = rows[0]
    if not count:
        return
    behind = ", ".join(
        f"{subscription!r} {passed} (positions {low} to {high})"
        for subscription, passed, low, high in rows[1:]
    )
    raise RebaseRefusedError(
        f"{count} messages written in this cluster since the restore (positions {first} to"
        f" {last}) have transaction ids below restored ones: the cluster's transaction counter"
        " passed the restored ids before a rebase, and daemons may have delivered since, so"
        " their order can no longer be mended without repeating or losing messages."
        + (
            f" Behind a checkpoint, so not delivered unless it is seeked back: {behind}"
            if behind
            else ""
        )
    )


def _advance_transaction_ids(conn: psycopg.Connection[Any], count: int) -> None:
    # Each iteration commits; nothing is written, so nothing needs to reach the disk first.
    conn.execute("SET synchronous_commit = off")
    try:
        conn.execute(_composed("advance_transaction_ids", count=sql.Literal(count)))
    finally:
        conn.execute("RESET synchronous_commit")


def _composed(name: str, **parts: sql.Composable) -> sql.Composed:
    return sql.SQL(RESTORE_QUERIES[name]).format(**parts)


def _scalar(conn: psycopg.Connection[Any], query: Any, **params: Any) -> int:
    row = conn.execute(query, params or None).fetchone()
    assert row is not None
    return int(row[0])
