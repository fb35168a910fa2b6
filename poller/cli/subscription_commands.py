"""`outbox subscription ...`, `outbox seek`, `outbox parked ...`."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import psycopg
from rich.console import Console
from rich.table import Table

from outbox.errors import InvalidMessageError
from poller import administration
from poller.cli.context import CommandContext
from poller.subscription import Strategy

SETTING_OPTIONS: list[tuple[str, type | click.Choice[str], str]] = [
    ("strategy", click.Choice([s.value for s in Strategy]), "How messages go to consumers."),
    ("consumers", int, "Concurrent consumers the daemon runs."),
    ("max_in_flight", int, "Messages in flight per consumer."),
    ("message_timeout", float, "Seconds before an unacknowledged message is retried."),
    ("max_retry_count", int, "Attempts before a message is parked."),
    ("retry_backoff_initial", float, "First retry delay, seconds (doubles per attempt)."),
    ("retry_backoff_max", float, "Longest retry delay, seconds."),
    ("read_batch_size", int, "Rows per read."),
    ("buffer_size", int, "Messages held in memory ahead of the consumers."),
    ("checkpoint_after", float, "Seconds after which finished messages are checkpointed."),
    ("min_checkpoint_count", int, "Finished messages needed for a timed checkpoint."),
    ("max_checkpoint_count", int, "Finished messages that force a checkpoint."),
]


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for name, kind, help_text in reversed(SETTING_OPTIONS):
        flag = "--" + name.replace("_", "-")
        command = click.option(flag, name, type=kind, default=None, help=help_text)(command)
    return command


def chosen_settings(values: dict[str, Any]) -> dict[str, Any]:
    return {name: values[name] for name, _, _ in SETTING_OPTIONS if values.get(name) is not None}


@contextmanager
def admin_connection(context: CommandContext) -> Iterator[psycopg.Connection[Any]]:
    """One short transaction; operator mistakes become clean CLI errors."""
    try:
        with psycopg.connect(context.database_url) as conn:
            yield conn
    except (administration.SubscriptionError, InvalidMessageError, ValueError) as error:
        raise click.ClickException(str(error)) from None


@click.group()
def subscription() -> None:
    """Create, list, update and delete subscriptions."""


@subscription.command("create")
@click.argument("name")
@click.option("--publication", required=True)
@click.option("--from", "start", default="end", show_default=True, help="start, end or TX:POS")
@setting_options
@click.pass_obj
def create(
    context: CommandContext, /, name: str, publication: str, start: str, **values: Any
) -> None:
    """Create subscription NAME on a publication."""
    with admin_connection(context) as conn:
        at = administration.create(conn, name, publication, start, chosen_settings(values))
    click.echo(f"created {name} on {publication}, starting after {at}")


@subscription.command("update")
@click.argument("name")
@setting_options
@click.pass_obj
def update(context: CommandContext, /, name: str, **values: Any) -> None:
    """Change settings; a running daemon applies them within a lease renewal."""
    changes = chosen_settings(values)
    if not changes:
        raise click.UsageError("name at least one setting to change")
    with admin_connection(context) as conn:
        administration.update_settings(conn, name, changes)
    click.echo(f"updated {name}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))


@subscription.command("list")
@click.pass_obj
def list_subscriptions(context: CommandContext) -> None:
    """List subscriptions with their checkpoints and settings."""
    table = Table()
    for column in ("subscription", "publication", "checkpoint", "epoch", "settings"):
        table.add_column(column)
    with admin_connection(context) as conn:
        for record in administration.list_all(conn):
            settings = ", ".join(f"{k}={v}" for k, v in record.stored_settings.items())
            table.add_row(
                record.subscription_id,
                record.publication,
                str(record.checkpoint),
                str(record.epoch),
                settings or "defaults",
            )
    Console().print(table)


@subscription.command("delete")
@click.argument("name")
@click.pass_obj
def delete(context: CommandContext, name: str) -> None:
    """Delete a subscription, its lease and its parked messages."""
    with admin_connection(context) as conn:
        administration.delete(conn, name)
    click.echo(f"deleted {name}")


@click.command()
@click.argument("name")
@click.option("--to", "to", required=True, help="start, end or TX:POS")
@click.pass_obj
def seek(context: CommandContext, name: str, to: str) -> None:
    """Move a subscription, even while its daemon runs (raises its epoch)."""
    with admin_connection(context) as conn:
        at, epoch = administration.seek(conn, name, to)
    click.echo(f"{name} now after {at} (epoch {epoch})")


@click.group()
def parked() -> None:
    """Messages a subscription gave up on."""


@parked.command("list")
@click.argument("name")
@click.option("--limit", default=100, show_default=True)
@click.pass_obj
def parked_list(context: CommandContext, name: str, limit: int) -> None:
    """Show parked messages with their last error."""
    table = Table()
    for column in ("position", "transaction", "type", "message id", "attempts", "error", "parked"):
        table.add_column(column)
    with admin_connection(context) as conn:
        for row in administration.list_parked(conn, name, limit):
            table.add_row(*(str(value) for value in row))
    Console().print(table)


@parked.command("replay")
@click.argument("name")
@click.pass_obj
def parked_replay(context: CommandContext, name: str) -> None:
    """Ask the running daemon to re-deliver parked messages (ahead of new ones)."""
    with admin_connection(context) as conn:
        administration.request_replay(conn, name)
    click.echo(f"replay of {name}'s parked messages requested")


@parked.command("purge")
@click.argument("name")
@click.pass_obj
def parked_purge(context: CommandContext, name: str) -> None:
    """Drop parked messages for good."""
    with admin_connection(context) as conn:
        count = administration.purge_parked(conn, name)
    click.echo(f"purged {count} parked messages of {name}")
