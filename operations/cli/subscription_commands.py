"""`outbox subscription ...`, `outbox seek`, `outbox parked ...`."""

import sys
from collections.abc import Callable
from typing import Any

import click

from operations.cli.context import CommandContext
from operations.cli.errors import CommandError
from operations.cli.printing import cell, checkpoint_text, console, escaped, table
from poller import administration
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
    with context.connect() as conn:
        at = administration.create(conn, name, publication, start, chosen_settings(values))
    click.echo(f"created {escaped(name)} on {escaped(publication)}, starting after {at}")


@subscription.command("update")
@click.argument("name")
@setting_options
@click.pass_obj
def update(context: CommandContext, /, name: str, **values: Any) -> None:
    """Change settings; a running daemon applies them within a lease renewal."""
    changes = chosen_settings(values)
    if not changes:
        raise click.UsageError("name at least one setting to change")
    with context.connect() as conn:
        administration.update_settings(conn, name, changes)
    click.echo(f"updated {escaped(name)}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))


@subscription.command("list")
@click.pass_obj
def list_subscriptions(context: CommandContext) -> None:
    """List subscriptions with their checkpoints and settings."""
    listing = table(("subscription", "publication", "checkpoint", "epoch", "settings"))
    with context.connect() as conn:
        for record in administration.list_all(conn):
            settings = ", ".join(f"{k}={v}" for k, v in record.stored_settings.items())
            listing.add_row(
                cell(record.subscription_id),
                cell(record.publication),
                cell(checkpoint_text(record.checkpoint)),
                cell(record.epoch),
                cell(settings or "defaults"),
            )
    console().print(listing)


@subscription.command("delete")
@click.argument("name")
@click.pass_obj
def delete(context: CommandContext, name: str) -> None:
    """Delete a subscription, its lease and its parked messages."""
    with context.connect() as conn:
        administration.delete(conn, name)
    click.echo(f"deleted {escaped(name)}")


@click.command()
@click.argument("name")
@click.option("--to", "to", required=True, help="start, end or TX:POS")
@click.pass_obj
def seek(context: CommandContext, name: str, to: str) -> None:
    """Move a subscription, even while its daemon runs (raises its epoch)."""
    with context.connect() as conn:
        at, epoch = administration.seek(conn, name, to)
    click.echo(f"{escaped(name)} now after {at} (epoch {epoch})")


@click.group()
def parked() -> None:
    """Messages a subscription gave up on."""


@parked.command("list")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, MAX_PARKED_LISTED), default=100, show_default=True)
@click.pass_obj
def parked_list(context: CommandContext, name: str, limit: int) -> None:
    """Show parked messages with their last error."""
    columns = ("position", "transaction", "type", "message id", "attempts", "error", "parked")
    listing = table(columns)
    with context.connect() as conn:
        for row in administration.list_parked(conn, name, limit):
            listing.add_row(*(cell(value) for value in row))
    console().print(listing)


@parked.command("replay")
@click.argument("name")
@click.pass_obj
def parked_replay(context: CommandContext, name: str) -> None:
    """Ask the running daemon to re-deliver parked messages (ahead of new ones)."""
    with context.connect() as conn:
        administration.request_replay(conn, name)
    click.echo(f"replay of {escaped(name)}'s parked messages requested")


@parked.command("purge")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def parked_purge(context: CommandContext, name: str, yes: bool) -> None:
    """Drop parked messages for good (asks first unless --yes)."""
    with context.connect() as conn:
        administration.get(conn, name)  # a missing subscription is an error before any question
        if not yes:
            _confirm(f"drop every parked message of {escaped(name)} for good?")
        count = administration.purge_parked(conn, name)
    click.echo(f"purged {count} parked messages of {escaped(name)}")


def _confirm(question: str) -> None:
    # Without a terminal nobody can answer: refuse rather than purge or hang on a pipe.
    if not sys.stdin.isatty():
        raise CommandError("refusing to purge without confirmation: pass --yes (no terminal)")
    click.confirm(question, abort=True)
