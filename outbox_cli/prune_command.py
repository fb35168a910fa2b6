"""`outbox prune`: the daemon's retention pass, by hand."""

from typing import Any

import click

from outbox_cli.context import CommandContext
from outbox_cli.errors import CommandError
from outbox_cli.option_fields import retention_fields
from outbox_cli.poll_commands import options_of
from outbox_cli.printing import cell, console
from outbox_cli.retention_printing import partition_line, print_oldest_holder
from poller import operations
from poller.daemon import DaemonOptions

_DONE = {
    "retired": "retired",
    "would retire": "would retire",
    "held": "kept (held again when re-checked under lock)",
    "busy": "skipped (its lock wait ran out; run prune again)",
    "archive damaged": "kept (its messages are in a damaged archive)",
}


@click.command()
@click.option("--dry-run", is_flag=True, help="Print what would be retired; change nothing.")
@options_of(retention_fields())
@click.pass_obj
def prune(context: CommandContext, /, dry_run: bool, **option_values: float | None) -> None:
    """Retire the partitions of outbox.messages that every subscription, consumer and parked
    message is done with and that are older than the minimum age; create those due ahead."""
    given: dict[str, Any] = {k: v for k, v in option_values.items() if v is not None}
    options = DaemonOptions(**given)
    out = console()
    with context.connect(autocommit=True) as conn:
        done = operations.retention_pass(conn, options, dry_run=dry_run)
        if not done.ran:
            raise CommandError("another process is running retention now; try again later")
        holders = operations.retention_holders(conn)
        minimum_age = options.retention_minimum_age
        partitions = operations.partition_holders(conn, minimum_age) if dry_run else []
    if done.closed.partition is not None:
        out.print(
            cell(
                f"closed {done.closed.partition} by age: new messages go to the next partition,"
                " and it is retired once passed"
            )
        )
    if done.closed.busy:
        out.print(cell("not closed by age now: writers held the lock too long; run prune again"))
    for name in done.created:
        out.print(cell(f"created partition {name}"))
    for attempt in done.retired:
        p = attempt.partition
        problem = "" if attempt.problem is None else f": {attempt.problem}"
        out.print(
            cell(
                f"{_DONE[attempt.outcome]} {p.name}: positions {p.first_position} to"
                f" {p.end_position - 1}, {p.messages} messages{problem}"
            )
        )
    if not done.retired:
        out.print(cell("nothing to retire"))
    for partition in partitions:  # a dry run's: what holds each one, oldest first
        out.print(cell(partition_line(partition, minimum_age)))
    print_oldest_holder(holders, options.retention_stale_after)
