"""`--json`: what scripts read instead of the tables people read.

Each command prints one JSON document on stdout (a list for listings, an object for one
item). The field names are made here, in one place, and documented in the README; a
position is both `TX:POS` (what `seek --to` takes) and its two numbers; times are RFC 3339
with their offset, durations are seconds. A name or an error is printed as stored, in JSON's
own escapes.
"""

import datetime
import json
from typing import Any

import click

from outbox.positions import Position
from poller.operations import (
    ParkedMessage,
    ParkedRow,
    PendingSkip,
    ReadReplica,
    ShardLeader,
    ShardStatus,
    Subscription,
    SubscriptionStatus,
)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")


def print_json(document: Any) -> None:
    # The standard library rather than orjson: message data may hold integers beyond 64 bits,
    # which orjson refuses, and a listing of at most 10,000 rows needs no faster encoder.
    # ensure_ascii: every character outside ASCII, control or not, comes out as \uXXXX, so
    # the output cannot drive a terminal it lands on either.
    click.echo(json.dumps(document, indent=2, ensure_ascii=True, default=_time_text))


def _time_text(value: object) -> str:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def position_fields(prefix: str, position: Position | None) -> dict[str, Any]:
    """TX:POS and its two numbers; three nulls for no position."""
    return {
        prefix: None if position is None else str(position),
        f"{prefix}_transaction_id": None if position is None else position.transaction_id,
        f"{prefix}_position": None if position is None else position.position,
    }


def status_document(row: SubscriptionStatus, replica: ReadReplica | None = None) -> dict[str, Any]:
    """`replica`: the hot standby `--read-database-url` named (its figures in every row)."""
    return {
        "subscription": row.subscription,
        "publication": row.publication,
        **position_fields("checkpoint", row.checkpoint),
        "messages_behind": row.messages_behind,
        "oldest_undelivered_age_seconds": row.oldest_undelivered_age,
        "leader_alive": row.leader_alive,
        "leader_host": row.leader_host,
        "leader_pid": row.leader_pid,
        "leader_since": row.leader_since,
        "hidden_messages": row.hidden,
        "blockers": [blocker._asdict() for blocker in row.blockers],
        "destination_unavailable": row.destination_unavailable,
        "shards": row.shards.shard_count,
        "shards_led": row.shards.led,
        "draining_shards": row.shards.draining_shard_count,
        "draining_shards_led": row.shards.draining_led,
        "shard_leaders": [shard_leader_document(shard) for shard in row.shard_leaders],
        "retrying": row.retrying,
        "parked_messages": row.parked,
        **position_fields("oldest_parked", row.oldest_parked),
        "oldest_parked_age_seconds": row.oldest_parked_age,
        "kind": row.kind or "subscription",
        "last_batch_at": row.last_batch_at,
        "read_replica": None if replica is None else read_replica_document(row, replica),
    }


def read_replica_document(row: SubscriptionStatus, replica: ReadReplica) -> dict[str, Any]:
    """Its lag, whether this row's reads wait for its replay, and a problem that stops the
    daemons reading there (refused, or unreachable: then the rest is null)."""
    found = replica.status
    if found is None:
        problem: str | None = replica.unreachable
    else:
        problem = found.refused
    return {
        "url": replica.masked_url,
        "problem": problem,
        "lag_bytes": None if found is None else found.lag.bytes,
        "lag_seconds": None if found is None else found.lag.seconds,
        "waiting": None if found is None else row.subscription in found.waiting,
    }


def shard_leader_document(shard: ShardLeader) -> dict[str, Any]:
    return {
        "shard": shard.unit.shard,
        "shard_count": shard.unit.shard_count,
        "draining": shard.draining,
        "leader_alive": shard.leader_alive,
        "leader_host": shard.leader_host,
        "leader_pid": shard.leader_pid,
        "leader_since": shard.leader_since,
    }


def subscription_document(
    record: Subscription,
    skip: PendingSkip | None = None,
    shards: list[ShardStatus] | None = None,
    *,
    detailed: bool = False,
) -> dict[str, Any]:
    """`subscription list` prints the stored settings and the shard layout (the checkpoint of
    a sharded subscription is its shards' floor); `show` adds every setting in effect
    (defaults included), the replay request count, a pending skip and each shard."""
    layout = record.layout
    document: dict[str, Any] = {
        "subscription": record.subscription_id,
        "publication": record.publication,
        **position_fields("checkpoint", record.checkpoint),
        "epoch": record.epoch,
        "settings": record.stored_settings,
        "shards": layout.shard_count,
        "draining_shards": layout.draining_shard_count,
        **position_fields("shard_barrier", layout.barrier),
    }
    if detailed:
        document["effective_settings"] = (
            None if record.kind is not None else record.settings.to_mapping()
        )
        document["replay_requests"] = record.replay_requests
        document["skip_requested_to"] = None if skip is None else str(skip.to)
        document["shard_status"] = [shard_document(shard) for shard in shards or []]
    return document


def shard_document(shard: ShardStatus) -> dict[str, Any]:
    return {
        "shard": shard.unit.shard,
        "shard_count": shard.unit.shard_count,
        "draining": shard.draining,
        **position_fields("checkpoint", shard.checkpoint),
        "messages_behind": shard.messages_behind,
        "leader_alive": shard.leader_alive,
        "leader_host": shard.leader_host,
        "leader_pid": shard.leader_pid,
        "leader_since": shard.leader_since,
    }


def parked_document(row: ParkedRow) -> dict[str, Any]:
    return {**row._asdict(), "at": str(Position(row.transaction_id, row.position))}


def parked_message_document(subscription: str, parked: ParkedMessage) -> dict[str, Any]:
    message = parked.message
    return {
        "subscription": subscription,
        "at": str(message.at),
        "position": message.position,
        "transaction_id": message.transaction_id,
        "publication": message.publication,
        "message_id": message.message_id,
        "message_type": message.message_type,
        "partition_key": message.partition_key,
        "headers": message.headers,
        "data": message.data,
        "appended_at": message.appended_at,
        "attempts": parked.attempts,
        "last_error": parked.last_error,
        "parked_at": parked.parked_at,
    }
