"""`outbox skip NAME --to TX:POS`: finish messages without delivering them, through the leader."""

import click

from outbox.positions import readable
from outbox_cli.context import CommandContext
from outbox_cli.printing import escaped
from poller import operations


@click.command()
@click.argument("name")
@click.option("--to", "to", required=True, help="end or TX:POS, past the checkpoint")
@click.pass_obj
def skip(context: CommandContext, name: str, to: str) -> None:
    """Skip every message up to TX:POS without delivering it (again), keeping the epoch.

    Unlike `seek`, nothing after TX:POS is delivered twice, and a skipped message whose
    delivery is under way keeps its key until it ends. The leader applies the request at its
    next lease renewal; without one, the next leader applies it before reading.
    """
    with context.connect() as conn:
        outcome = operations.request_skip(conn, name, to)
    if outcome.pending != outcome.requested:
        pending, requested = outcome.pending, outcome.requested
        click.echo(
            f"{escaped(name)}: a skip to {readable(pending)} is already pending;"
            f" it covers {readable(requested)}"
        )
        return
    when = "at its next lease renewal" if outcome.leader_alive else "when a daemon next leads it"
    click.echo(f"{escaped(name)}: skip to {readable(outcome.requested)} requested; applied {when}")
