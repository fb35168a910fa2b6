"""`outbox subscription ...`, `outbox seek`, `outbox parked ...`."""

import datetime
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from outbox.positions import readable
from outbox.shards import MAX_SHARDS
from outbox_cli.context import CommandContext
from outbox_cli.errors import CommandUsageError
from outbox_cli.json_output import (
    json_option,
    parked_document,
    parked_message_document,
    print_json,
    subscription_document,
)
from outbox_cli.printing import cell, console, escaped, table
from outbox_cli.shard_printing import layout_text, shard_table
from poller import operations
from poller.operations import ShardChange, quoted
from poller.subscription.settings import SETTINGS

# A listing larger than this is not read on a terminal; it would only load the database.
MAX_PARKED_LISTED = 10_000


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--consumers, --strategy, ...: one per subscription setting, type, bounds, default and
    help taken from poller.subscription.SETTINGS, where they are written once."""
    for spec in reversed(SETTINGS):
        flag = "--" + spec.name.replace("_", "-")
        kind: type | click.Choice[str] = click.Choice(spec.choices) if spec.choices else spec.kind
        command = click.option(flag, spec.name, type=kind, default=None, help=spec.help)(command)
    return command


def chosen_settings(values: dict[str, Any]) -> dict[str, Any]:
    return {spec.name: values[spec.name] for spec in SETTINGS if values.get(spec.name) is not None}


def shards_option(help_text: str, default: int | None) -> Callable[..., Any]:
    return click.option(
        "--shards",
        type=str,  # read by _shard_count, which refuses every bad value in the same words
        callback=_shard_count,
        default=None if default is None else str(default),
        show_default=default is not None,
        metavar="N",
        help=f"{help_text} 1 to {MAX_SHARDS}.",
    )


def _shard_count(
    _context: click.Context, _parameter: click.Parameter, value: str | None
) -> int | None:
    """A whole number from 1 to MAX_SHARDS in ASCII digits (int() takes other scripts' digits)."""
    if value is None:
        return None
    if value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_SHARDS:
        return int(value)
    raise CommandUsageError(f"--shards {quoted(value)} is not a shard count from 1 to {MAX_SHARDS}")


@click.group()
def subscription() -> None:
    """Create, list, update and delete subscriptions."""


@subscription.command("create")
@click.argument("name")
@click.option("--publication", required=True)
@click.option("--from", "start", default="end", show_default=True, help="start, end or TX:POS")
@shards_option("Shards to split the subscription into, each led by one process:", 1)
@setting_options
@click.pass_obj
def create(
    context: CommandContext, /, name: str, publication: str, start: str, shards: int, **values: Any
) -> None:
    """Create subscription NAME on a publication."""
    with context.connect() as conn:
        at = operations.create(conn, name, publication, start, chosen_settings(values), shards)
    of = f" ({shards} shards)" if shards > 1 else ""
    after = readable(at)
    click.echo(f"created {escaped(name)} on {escaped(publication)}{of}, starting after {after}")


@subscription.command("update")
@click.argument("name")
@shards_option("A new shard count; the old shards drain first (`subscription show`):", None)
@setting_options
@click.pass_obj
def update(context: CommandContext, /, name: str, shards: int | None, **values: Any) -> None:
    """Change settings; a running daemon applies them within a lease renewal."""
    changes = chosen_settings(values)
    if not changes and shards is None:
        raise click.UsageError("name at least one setting, or --shards, to change")
    # One transaction: a refused change of the shard count leaves the settings as they were.
    with context.connect() as conn, conn.transaction():
        change = None
        if shards is not None:
            change = operations.change_shard_count(conn, name, shards)
        if changes:
            operations.update_settings(conn, name, changes)
    if changes:
        settings = ", ".join(f"{k}={v}" for k, v in changes.items())
        click.echo(f"updated {escaped(name)}: {settings}")
    if change is not None:
        click.echo(_shard_change_text(name, change))


def _shard_change_text(name: str, change: ShardChange) -> str:
    if change.barrier is None:
        return f"{escaped(name)} already has {_shards(change.shard_count)}; nothing to change"
    old, new = change.previous, change.shard_count
    drain = "the old shard delivers" if old == 1 else f"the {old} old shards deliver"
    then = "the new shard starts" if new == 1 else "the new ones start"
    return (
        f"{escaped(name)}: {_shards(old)} -> {_shards(new)}; {drain} up to"
        f" {readable(change.barrier)},"
        f" then {then} after it (`outbox subscription show` follows the change)"
    )


def _shards(count: int) -> str:
    return "1 shard" if count == 1 else f"{count} shards"


@subscription.command("list")
@json_option
@click.pass_obj
def list_subscriptions(context: CommandContext, as_json: bool) -> None:
    """List subscriptions with their checkpoints and settings."""
    with context.connect() as conn:
        records = operations.list_all(conn)
    if as_json:
        print_json([subscription_document(record) for record in records])
        return
    listing = table(("subscription", "publication", "checkpoint", "epoch", "shards", "settings"))
    for record in records:
        listing.add_row(
            cell(record.subscription_id),
            cell(record.publication),
            cell(readable(record.checkpoint)),
            cell(record.epoch),
            cell(layout_text(record.layout)),
            cell(_settings_text(record.stored_settings) or "defaults"),
        )
    console().print(listing)


@subscription.command("show")
@click.argument("name")
@json_option
@click.pass_obj
def show(context: CommandContext, name: str, as_json: bool) -> None:
    """One subscription: checkpoint, epoch, every setting in effect, a pending skip, and
    each shard (its checkpoint, backlog and leader)."""
    with context.connect() as conn:
        record = operations.get(conn, name)
        skip = operations.skip_request(conn, name)
        shards = operations.shards(conn, name)
    document = subscription_document(record, skip, shards, detailed=True)
    if as_json:
        print_json(document)
        return
    shown = table(("field", "value"), show_header=False)
    for field, value in document.items():
        if field.endswith(("_transaction_id", "_position")) or field == "shard_status":
            continue  # the TX:POS field says it; the shards get a table of their own
        if field == "checkpoint":
            value = readable(record.checkpoint)
        elif isinstance(value, dict):
            value = _settings_text(value) or "defaults"
        shown.add_row(cell(field.replace("_", " ")), cell("-" if value is None else value))
    console().print(shown)
    console().print(shard_table(shards))


def _settings_text(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


@subscription.command("delete")
@click.argument("name")
@click.pass_obj
def delete(context: CommandContext, name: str) -> None:
    """Delete a subscription, its lease and its parked messages."""
    with context.connect() as conn:
        operations.delete(conn, name)
    click.echo(f"deleted {escaped(name)}")


def _time(
    _context: click.Context, _parameter: click.Parameter, value: str | None
) -> datetime.datetime | None:
    return None if value is None else operations.parse_time(value)


@click.command()
@click.argument("name")
@click.option("--to", "to", help="start, end or TX:POS")
@click.option(
    "--to-time",
    "to_time",
    callback=_time,
    help="Resume with the first message appended at or after this time (ISO 8601, with offset).",
)
@click.option("--to-message", "to_message", help="Resume with this message id of the publication.")
@click.pass_obj
def seek(
    context: CommandContext,
    name: str,
    to: str | None,
    to_time: datetime.datetime | None,
    to_message: str | None,
) -> None:
    """Move a subscription, even while its daemon runs (raises its epoch); a sharded one's
    shards all move with it. Refused while a change of its shard count drains."""
    if sum(value is not None for value in (to, to_time, to_message)) != 1:
        raise click.UsageError("give exactly one of --to, --to-time and --to-message")
    with context.connect() as conn:
        if to_time is not None:
            at, epoch = operations.seek_to_time(conn, name, to_time)
        elif to_message is not None:
            at, epoch = operations.seek_to_message(conn, name, to_message)
        else:
            assert to is not None
            at, epoch = operations.seek(conn, name, to)
    click.echo(f"{escaped(name)} now after {readable(at)} (epoch {epoch})")


@click.group()
def parked() -> None:
    """Messages a subscription gave up on."""


@parked.command("list")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, MAX_PARKED_LISTED), default=100, show_default=True)
@json_option
@click.pass_obj
def parked_list(context: CommandContext, name: str, limit: int, as_json: bool) -> None:
    """Show parked messages with their attempts and last error."""
    with context.connect() as conn:
        rows = operations.list_parked(conn, name, limit)
    if as_json:
        print_json([parked_document(row) for row in rows])
        return
    columns = ("position", "transaction", "type", "message id", "attempts", "error", "parked")
    listing = table((*columns, "shard", "replay requested"))
    for row in rows:
        listing.add_row(*(cell("-" if value is None else value) for value in row))
    console().print(listing)


@parked.command("show")
@click.argument("name")
@click.argument("position")
@json_option
@click.pass_obj
def parked_show(context: CommandContext, name: str, position: str, as_json: bool) -> None:
    """The whole parked message at POSITION (POS or TX:POS) with its attempts and error."""
    with context.connect() as conn:
        found = operations.parked_message(conn, name, position)
    document = parked_message_document(name, found)
    if as_json:
        print_json(document)
        return
    shown = table(("field", "value"), show_header=False)
    for field in ("at", "publication", "message_id", "message_type", "partition_key"):
        shown.add_row(cell(field.replace("_", " ")), cell(_or_dash(document[field])))
    shown.add_row(cell("headers"), cell(json.dumps(found.message.headers, ensure_ascii=False)))
    shown.add_row(cell("data"), cell(found.message.data_text))
    for field in ("appended_at", "attempts", "last_error", "parked_at"):
        value = document[field]
        text = value.isoformat() if isinstance(value, datetime.datetime) else value
        shown.add_row(cell(field.replace("_", " ")), cell(text))
    console().print(shown)


def _or_dash(value: object) -> object:
    return "-" if value is None else value


def parked_target(command: Callable[..., Any]) -> Callable[..., Any]:
    """NAME, then an optional POSITION or --id: one parked message, or every one."""
    for decorate in reversed(
        [
            click.argument("name"),
            click.argument("position", required=False),
            click.option(
                "--id", "message_id", help="The parked message with this message id, instead."
            ),
        ]
    ):
        command = decorate(command)
    return command


@parked.command("replay")
@parked_target
@click.pass_obj
def parked_replay(
    context: CommandContext, name: str, position: str | None, message_id: str | None
) -> None:
    """Deliver parked messages again, ahead of new ones: every one, or the one at POSITION
    (POS or TX:POS) or with --id.

    The leader of each message's shard replays it at its next lease renewal; while no daemon
    runs, the next leader does before its first read. A replay outlives a seek; one that fails
    parks the message again.
    """
    with context.connect() as conn:
        target = operations.parked_target(conn, name, position, message_id)
        requested = operations.request_replay(conn, name, target)
    if not requested.marked:
        click.echo(f"{escaped(name)} has no parked messages to replay")
        return
    sharded = any(shard.shard_count > 1 for _, shard in requested.marked)
    if target is None:
        what, them = f"{len(requested.marked)} parked messages", "them"
        if sharded:
            what += " (each by the leader of its shard)"
    else:
        ((at, shard),) = requested.marked
        what, them = f"the parked message at {at}", "it"
        if sharded:
            what += f" (by the leader of shard {shard})"
    if requested.leader_alive:
        when = f"the leader replays {them} at its next lease renewal"
    else:
        when = f"no daemon leads {escaped(name)} now: the next leader replays {them} first"
    click.echo(f"{escaped(name)}: replay of {what} requested; {when}")


@parked.command("purge")
@parked_target
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def parked_purge(
    context: CommandContext, name: str, position: str | None, message_id: str | None, yes: bool
) -> None:
    """Drop parked messages for good: every one, or the one at POSITION (POS or TX:POS) or
    with --id (asks first unless --yes)."""
    with context.connect() as conn:
        # A missing subscription or message is an error before any question.
        target = operations.parked_target(conn, name, position, message_id)
        what = "every parked message" if target is None else f"the parked message at {target}"
        if not yes:
            _confirm(f"drop {what} of {escaped(name)} for good?")
        count = operations.purge_parked(conn, name, target)
    click.echo(f"purged {count} parked messages of {escaped(name)}")


def _confirm(question: str) -> None:
    # Without a terminal nobody can answer: refuse rather than purge or hang on a pipe. A
    # usage error: the command as typed cannot run here.
    if not sys.stdin.isatty():
        raise CommandUsageError("refusing to purge without confirmation: pass --yes (no terminal)")
    click.confirm(question, abort=True)
