"""`outbox tail`: watch a publication live, on a terminal screen or as plain lines."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING

import click

from outbox.positions import Position
from outbox_cli.context import CommandContext
from outbox_cli.tail.plain import print_lines, until_the_reader_leaves
from poller import Checkpoint, operations

if TYPE_CHECKING:
    from outbox_cli.tail.app import Event

# As `outbox subscription create`: a tail shows what happens from now on unless told otherwise.
DEFAULT_START = "end"


def _start(value: str) -> str | Checkpoint:
    """Parsed in the command, not in a click callback: click would print its usage banner
    around the error, and a refused value is one line here (outbox_cli.errors)."""
    if value in ("start", "end"):
        return value
    try:
        at = Position.parse(value)
    except ValueError as error:
        raise ValueError(f"--from: {error}; give start, end or TX:POS") from None
    return Checkpoint(at.transaction_id, at.position)


@click.command()
@click.option("--publication", required=True, help="The publication to watch.")
@click.option(
    "--from",
    "start",
    default=DEFAULT_START,
    show_default=True,
    help="start, end, or TX:POS to show the messages after that checkpoint.",
)
@click.option("--type", "message_types", multiple=True, help="Only this type (repeatable).")
@click.option("--key", "partition_key", help="Only messages with this partition key.")
@click.option("--plain", is_flag=True, help="Print one line per event instead of the screen.")
@click.pass_obj
def tail(
    context: CommandContext,
    publication: str,
    start: str,
    message_types: tuple[str, ...],
    partition_key: str | None,
    plain: bool,
) -> None:
    """Show a publication's messages as they arrive: the backlog after --from, then live
    messages and checkpoint signals. On the screen: arrows move, Enter shows the whole message,
    End follows the newest row again, q or Ctrl-C quits."""
    # subscribe checks every argument here, before connecting: a bad value is a usage error.
    events = operations.tail(
        context.database_url,
        publication,
        start=_start(start),
        message_types=message_types or None,
        partition_key=partition_key,
    )
    try:
        if plain:
            asyncio.run(_print_plain(events))
        else:
            failure = asyncio.run(_show_screen(events, publication))
            if failure is not None:
                raise failure
    except KeyboardInterrupt:
        # Ctrl-C is how a tail is ended: no traceback, no error.
        return
    except BrokenPipeError:
        # The reader (`head`, a closed pager) has gone; so does the tail. Python would report
        # the pipe again when it flushes stdout at exit, so that flush goes nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


async def _print_plain(events: AsyncGenerator[Event]) -> None:
    """Print until the subscription ends or the pipe's reader goes, whichever comes first."""
    printing = asyncio.ensure_future(print_lines(events, lambda line: print(line, flush=True)))
    watching = asyncio.ensure_future(until_the_reader_leaves(sys.stdout.fileno()))
    try:
        await asyncio.wait({printing, watching}, return_when=asyncio.FIRST_COMPLETED)
        if watching.done():
            raise BrokenPipeError("the reader of the tail's output has gone")
        printing.result()
    finally:
        for task in (printing, watching):
            task.cancel()
        await asyncio.gather(printing, watching, return_exceptions=True)
        await events.aclose()


async def _show_screen(events: AsyncGenerator[Event], publication: str) -> BaseException | None:
    """Run the screen; return the error that ended the subscription, if any."""
    # Only the screen needs textual (the tui extra); imported before connecting, so without it
    # that is the error, and --plain works.
    from outbox_cli.tail.app import TailApp

    try:
        # The first event proves the database answers, so a wrong URL or a missing schema is
        # a one-line error on a normal terminal instead of a screen that opens and closes.
        first = await anext(events)
        app = TailApp(_prepended(first, events), publication)
        await app.run_async()
        return app.failure
    finally:
        await events.aclose()


async def _prepended(first: Event, rest: AsyncIterator[Event]) -> AsyncIterator[Event]:
    yield first
    async for event in rest:
        yield event
