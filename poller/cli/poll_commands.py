"""`outbox poll` and `outbox status`."""

import asyncio
import tomllib
from pathlib import Path

import click
import psycopg
from rich.console import Console
from rich.table import Table

from poller import administration
from poller.cli.context import CommandContext
from poller.daemon.handlers import HandlerNotFoundError, load_handler
from poller.daemon.options import DaemonOptions
from poller.daemon.runner import run_daemon


@click.command()
@click.option("--subscription", "subscriptions", multiple=True, help="Repeat for several.")
@click.option("--handler", "handler_spec", help="package.module:callable")
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="TOML with `handler` and `subscriptions = [...]`.",
)
@click.option("--lease-seconds", default=4.0, show_default=True, help="Standby takeover bound.")
@click.option("--poll-interval-max", default=0.1, show_default=True, help="Idle poll ceiling, s.")
@click.option("--stall-threshold", default=5.0, show_default=True, help="Warn after, seconds.")
@click.option("--shutdown-timeout", default=10.0, show_default=True, help="For handlers, s.")
@click.pass_obj
def poll(
    context: CommandContext,
    subscriptions: tuple[str, ...],
    handler_spec: str | None,
    config: Path | None,
    lease_seconds: float,
    poll_interval_max: float,
    stall_threshold: float,
    shutdown_timeout: float,
) -> None:
    """Run the daemon: deliver every committed message of the subscriptions to the handler."""
    names = list(subscriptions)
    if config is not None:
        document = tomllib.loads(config.read_text())
        names += list(document.get("subscriptions", []))
        handler_spec = handler_spec or document.get("handler")
    if not names:
        raise click.UsageError("name a --subscription (or list them in --config)")
    if not handler_spec:
        raise click.UsageError("name a --handler package.module:callable (or in --config)")
    try:
        handler = load_handler(handler_spec)
        options = DaemonOptions(
            lease_seconds=lease_seconds,
            renew_every=min(1.0, lease_seconds / 4),
            poll_interval_max=poll_interval_max,
            stall_threshold=stall_threshold,
            shutdown_timeout=shutdown_timeout,
        )
    except (HandlerNotFoundError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    url = context.database_url
    with psycopg.connect(url) as conn:
        try:
            for name in names:
                if administration.get(conn, name).stored_settings.get("kind") == "spark":
                    raise click.ClickException(
                        f"subscription {name!r} records a Spark query's progress;"
                        " the Spark job reads it, not `outbox poll`"
                    )
        except administration.SubscriptionError as error:
            raise click.ClickException(str(error)) from None
    asyncio.run(run_daemon(url, names, handler, options))


@click.command()
@click.pass_obj
def status(context: CommandContext) -> None:
    """Where every subscription stands (the view outbox.subscription_status)."""
    table = Table()
    columns = ("subscription", "publication", "checkpoint", "behind", "oldest undelivered")
    for column in (*columns, "leader", "blocked by"):
        table.add_column(column)
    with psycopg.connect(context.database_url) as conn:
        rows = administration.status(conn)
    for name, publication, tx, pos, behind, age, host, pid, since, alive, blocked in rows:
        leader = f"{host} pid {pid} since {since:%H:%M:%S}" if alive else "none"
        table.add_row(
            name,
            publication,
            f"{tx}:{pos}",
            str(behind),
            "-" if age is None else f"{age:.1f} s",
            leader,
            blocked or "-",
        )
    Console(width=200).print(table)
