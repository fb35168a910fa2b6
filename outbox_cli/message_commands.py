"""`outbox message show`: one message, with the TX:POS that `outbox seek` takes."""

import json

import click

from outbox.positions import Position
from outbox_cli.context import CommandContext
from outbox_cli.printing import cell, console, table
from poller import operations


@click.group()
def message() -> None:
    """Messages of a publication."""


def _position(
    _context: click.Context, _parameter: click.Parameter, value: str | None
) -> Position | int | None:
    """A usage error in one line (outbox_cli.errors), not click's banner around it."""
    return None if value is None else operations.parse_place(value)


@message.command("show")
@click.argument("publication")
@click.option("--id", "message_id", help="The message id given to append (or generated).")
@click.option(
    "--position",
    "at",
    callback=_position,
    help="POS, as append returns it, or TX:POS, as status and seek print it.",
)
@click.pass_obj
def show(
    context: CommandContext, publication: str, message_id: str | None, at: Position | int | None
) -> None:
    """Print one message of PUBLICATION, found by --id or --position."""
    if (message_id is None) == (at is None):
        raise click.UsageError("give exactly one of --id and --position")
    with context.connect() as conn:
        found = operations.find_message(conn, publication, message_id=message_id, at=at)
    shown = table(("field", "value"), show_header=False)
    for field, value in (
        ("position", found.at),
        ("publication", found.publication),
        ("message id", found.message_id),
        ("type", found.message_type),
        ("partition key", "-" if found.partition_key is None else found.partition_key),
        ("headers", json.dumps(found.headers, ensure_ascii=False)),
        ("data", found.data_text),
        ("appended at", found.appended_at.isoformat()),
    ):
        shown.add_row(cell(field), cell(value))
    console().print(shown)
