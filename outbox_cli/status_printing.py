"""How `outbox status` reads on a terminal: one line per subscription, then the leader of each
shard of the sharded ones."""

from rich.table import Table

from outbox.positions import readable
from outbox_cli.printing import cell, console, table, time_text
from outbox_cli.shard_printing import leadership_text
from poller.operations import Blocker, ReadReplica, ShardLeader, SubscriptionStatus

MISSING_PRIVILEGE = "unknown (needs pg_read_all_stats)"

_COLUMNS = ("subscription", "publication", "checkpoint", "behind", "oldest undelivered")
_MORE_COLUMNS = ("leader", "shards", "retrying", "parked", "blocked by")


def print_status(rows: list[SubscriptionStatus]) -> None:
    listing = table((*_COLUMNS, *_MORE_COLUMNS))
    for row in rows:
        spark = row.kind is not None
        age = row.oldest_undelivered_age
        listing.add_row(
            cell(row.subscription),
            cell(row.publication),
            cell(readable(row.checkpoint)),
            # A Spark query reads when it runs: what it has not read yet is no lag of a daemon.
            cell("-" if spark else row.messages_behind),
            cell("-" if spark or age is None else f"{age:.1f} s"),
            cell(_spark_text(row) if spark else _leader_text(row)),
            cell("-" if spark else leadership_text(row.shards)),
            cell("-" if spark else row.retrying),
            cell(_parked_text(row)),
            cell(_blocked_by(row)),
        )
    console().print(listing)
    sharded = [row for row in rows if row.shards.shard_count > 1 or row.shards.draining_shard_count]
    if sharded:
        console().print(_shard_leaders_table(sharded))


def print_blocking_queries(rows: list[SubscriptionStatus]) -> None:
    """`--show-query`: what each blocking session runs, as outbox.blocking_transactions
    shows it (its start, password literals redacted)."""
    for row in rows:
        for blocker in row.blockers:
            if blocker.pid is not None:
                query = " ".join((blocker.query_start or MISSING_PRIVILEGE).split())
                console().print(
                    cell(f"{row.subscription}: session {blocker.pid}, last statement: {query}")
                )


def print_read_replica(replica: ReadReplica, rows: list[SubscriptionStatus]) -> None:
    """How far behind the primary the hot standby is, and who waits for its replay."""
    found = replica.status
    if found is None:
        console().print(cell(f"read replica {replica.masked_url}: {replica.unreachable}"))
        return
    if found.refused is not None:
        console().print(
            cell(f"read replica {replica.masked_url}: the daemons refuse it: {found.refused}")
        )
        return
    console().print(cell(f"read replica {replica.masked_url}: {found.lag.describe()}"))
    for row in rows:
        if row.subscription in found.waiting:
            console().print(
                cell(
                    f"{row.subscription}: the read replica has not replayed up to its checkpoint"
                    f" {readable(row.checkpoint)}; its reads wait for it"
                )
            )


def _leader_text(row: SubscriptionStatus) -> str:
    if row.leader_alive and row.leader_since is not None:
        return f"{row.leader_host} pid {row.leader_pid} since {row.leader_since:%H:%M:%S}"
    return "none"


def _spark_text(row: SubscriptionStatus) -> str:
    """A Spark query keeps its progress in the row and runs when it is started: it has no
    leader, and an idle one is not stuck."""
    if row.last_batch_at is None:
        return "Spark query"
    return f"Spark query, last batch {time_text(row.last_batch_at)}"


def _parked_text(row: SubscriptionStatus) -> str:
    if not row.parked or row.oldest_parked is None:
        return str(row.parked)
    age = "" if row.oldest_parked_age is None else f", {row.oldest_parked_age:.0f} s ago"
    return f"{row.parked} (oldest {readable(row.oldest_parked)}{age})"


def _shard_leaders_table(rows: list[SubscriptionStatus]) -> Table:
    shown = table(("subscription", "shard", "leader", "alive"))
    for row in rows:
        for shard in row.shard_leaders:
            shown.add_row(
                cell(row.subscription),
                cell(_shard_text(shard)),
                cell(_shard_leader_text(shard)),
                cell("yes" if shard.leader_alive else "no"),
            )
    return shown


def _shard_text(shard: ShardLeader) -> str:
    unit = f"{shard.unit.shard}/{shard.unit.shard_count}"
    return f"{unit} draining" if shard.draining else unit


def _shard_leader_text(shard: ShardLeader) -> str:
    if shard.leader_host is None:
        return "none"
    since = "" if shard.leader_since is None else f" since {shard.leader_since:%H:%M:%S}"
    held = "" if shard.leader_alive else " (lease expired)"
    return f"{shard.leader_host} pid {shard.leader_pid}{since}{held}"


def _blocked_by(row: SubscriptionStatus) -> str:
    if not row.hidden:
        return "-"
    if not row.blockers:
        # Committed messages wait, yet no holder is visible: another user's session.
        return MISSING_PRIVILEGE
    return "; ".join(_blocker_text(blocker) for blocker in row.blockers)


def _blocker_text(blocker: Blocker) -> str:
    who = blocker.pid if blocker.pid is not None else blocker.application_name
    age = None if blocker.transaction_age is None else f"{blocker.transaction_age:.0f} s"
    fields = [blocker.database, blocker.user_name, blocker.state]
    known = ", ".join(str(value) for value in fields if value is not None)
    details = f"{known}, in transaction for {age}" if age is not None else known
    if None in (*fields, age):
        details += f"; {'the rest ' if details else ''}{MISSING_PRIVILEGE}"
    return f"{blocker.kind} {who} ({details})"
