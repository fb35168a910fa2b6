"""`outbox poll` and `outbox status`."""

import asyncio
import dataclasses
import logging
import os
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click
import psycopg
from prometheus_client.registry import Collector

from outbox.database_url import mask_password
from outbox_cli.context import CommandContext
from outbox_cli.database_options import (
    DAEMON_READ_HELP,
    embedded_database_option,
    given_read_database_url,
    read_database_url_option,
)
from outbox_cli.errors import CommandUsageError
from outbox_cli.first_connection import connect_when_up
from outbox_cli.json_output import json_option, print_json, status_document
from outbox_cli.log_format import DEFAULT_LOG_FORMAT, LOG_FORMATS, use_log_format
from outbox_cli.option_fields import command_line_fields, retention_fields
from outbox_cli.poll_config import read_poll_config
from outbox_cli.printing import cell, console
from outbox_cli.retention_printing import archive_line, print_oldest_holder
from outbox_cli.status_printing import print_blocking_queries, print_read_replica, print_status
from poller import operations
from poller.daemon import (
    DaemonOptions,
    Handler,
    HandlerNotFoundError,
    HandlerSignatureError,
    PackageShadowedError,
    load_handler,
    run_daemon,
    set_for_daemon,
)
from poller.message import Message

# package.module:callable, each part an identifier: anything else (`../etc:passwd`, a relative
# import) is refused before the import machinery sees it.
_HANDLER_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

log = logging.getLogger(__name__)


def daemon_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--lease-seconds, --shutdown-timeout, ...: one per DaemonOptions field, help and default
    taken from the field, so they are written once."""
    return options_of(command_line_fields())(command)


def options_of(
    fields: list[dataclasses.Field[Any]],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Command-line options for these DaemonOptions fields (unset ones stay None)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for field in reversed(fields):
            flag = "--" + field.name.replace("_", "-")
            help_text = f"{field.metadata['help']} [default: {field.default}]"
            kind = float if field.type in (float, "float") else int  # int, or a port (int | None)
            option = click.option(flag, field.name, type=kind, default=None, help=help_text)
            command = option(command)
        return command

    return decorate


def daemon_command(config_keys: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options `outbox poll` and `outbox relay` share: subscriptions, a TOML config (with
    `config_keys`), the log format, --embedded-database, --read-database-url and every daemon
    option."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = embedded_database_option(daemon_options(command))
        command = read_database_url_option(DAEMON_READ_HELP)(command)
        for option in reversed(
            [
                click.option(
                    "--subscription",
                    "subscriptions",
                    multiple=True,
                    # Not click's required=True: --config may list them instead.
                    help="Repeat for several. [required, here or in --config]",
                ),
                click.option(
                    "--config",
                    type=click.Path(exists=True, dir_okay=False, path_type=Path),
                    help=f"TOML with {config_keys} and `subscriptions = [...]`.",
                ),
                click.option(
                    "--log-format",
                    type=click.Choice(LOG_FORMATS),
                    default=DEFAULT_LOG_FORMAT,
                    show_default=True,
                    help="json: one JSON object per line (subscription, leader_token, ...).",
                ),
            ]
        ):
            command = option(command)
        return command

    return decorate


@click.command()
@click.option(
    "--handler",
    "handler_spec",
    help="package.module:callable [required, here or in --config]",
)
@daemon_command("`handler`")
@click.pass_obj
def poll(
    context: CommandContext,
    /,
    subscriptions: tuple[str, ...],
    handler_spec: str | None,
    config: Path | None,
    log_format: str,
    read_database_url: str | None,
    **option_values: float | None,
) -> None:
    """Run the daemon: deliver every committed message of the subscriptions to the handler.

    The current directory comes first on the import path, as with `python -m`, so a handler
    module beside you is found.

    \b
    Example (myapp/handlers.py defines `def on_order(message): ...`):
      outbox poll --subscription billing --handler myapp.handlers:on_order
    """
    use_log_format(log_format)
    names = list(subscriptions)
    if config is not None:
        document = read_poll_config(config)
        names += document.subscriptions
        handler_spec = handler_spec or document.handler
    if not names:
        raise click.UsageError("name a --subscription (or list them in --config)")
    if handler_spec is None:
        raise click.UsageError("name a --handler package.module:callable (or in --config)")
    read_url = given_read_database_url(context, read_database_url)
    serve(context, names, _handler(handler_spec), option_values, read_database_url=read_url)


def serve(
    context: CommandContext,
    names: list[str],
    handler: Handler,
    option_values: dict[str, float | None],
    collectors: Sequence[Collector] = (),
    closers: Sequence[Callable[[], Awaitable[None]]] = (),
    *,
    read_database_url: str | None = None,
) -> None:
    """Check the subscriptions (and the hot standby to read from), then run the daemon on
    them until SIGTERM or SIGINT."""
    given = {name: value for name, value in option_values.items() if value is not None}
    options = DaemonOptions.with_lease(**given, read_database_url=read_database_url)

    def check(stop: threading.Event) -> None:
        # While the database is down this waits, with the probes served: a liveness probe
        # sees a live daemon that is not ready, not one to restart.
        with connect_when_up(context, stop=stop) as conn:
            for name in names:
                operations.check_pollable(name, operations.get(conn, name))
                operations.ensure_not_restored(conn, name)
            if read_database_url is not None:
                _check_read_server(context, conn, read_database_url, stop)

    set_for_daemon()
    run = run_daemon(
        context.database_url,
        names,
        handler,
        options,
        collectors=collectors,
        closers=closers,
        startup_checks=check,
    )
    unfinished = asyncio.run(run)
    if unfinished:
        exit_without_waiting(unfinished)


def _check_read_server(
    context: CommandContext, conn: psycopg.Connection[Any], read_url: str, stop: threading.Event
) -> None:
    """Refuses (exit 2) a read server that is no standby of the database, before any read;
    says how far behind it is. A standby still starting is waited for, as the database is."""
    masked = mask_password(read_url)
    with connect_when_up(context, read_url, stop) as read_conn:
        lag = operations.check_read_server(conn, read_conn, masked)
    log.info(
        "reading messages from %s, %s; leases, checkpoints and parked rows stay on %s",
        masked,
        lag,
        mask_password(context.database_url),
    )


def exit_without_waiting(unfinished: list[Message]) -> NoReturn:
    """Handler threads cannot be stopped, and the interpreter would wait for them at exit
    forever; the final checkpoint of what finished is written, so end the process now."""
    log.error(
        "exiting with %d handler(s) still running after the shutdown timeout: %s",
        len(unfinished),
        ", ".join(map(repr, unfinished)),
    )
    logging.shutdown()  # flush every log handler: os._exit skips the usual clean-up
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _handler(spec: str) -> Handler:
    if not _HANDLER_SPEC.fullmatch(spec):
        raise HandlerNotFoundError(
            f"handler {operations.quoted(spec)} is not of the form package.module:callable"
        )
    if sys.path[:1] != [os.getcwd()]:
        sys.path.insert(0, os.getcwd())
    try:
        return load_handler(spec)
    except (HandlerNotFoundError, HandlerSignatureError, PackageShadowedError):
        raise
    except Exception as error:  # the module's own code failed while importing
        raise CommandUsageError(
            f"handler {operations.quoted(spec)}: importing it raised"
            f" {type(error).__name__}: {error}"
        ) from None


@click.command()
@options_of([f for f in retention_fields() if f.name == "retention_stale_after"])
@read_database_url_option(
    "The read replica (hot standby) the daemons read messages from: how far behind the"
    " database it is, and which subscriptions wait for its replay."
)
@click.option(
    "--show-query",
    is_flag=True,
    help="Also print the start of each blocking session's SQL (password literals redacted).",
)
@json_option
@click.pass_obj
def status(
    context: CommandContext,
    /,
    as_json: bool,
    show_query: bool,
    read_database_url: str | None,
    retention_stale_after: float | None,
) -> None:
    """Where every subscription stands (the view outbox.subscription_status): its backlog,
    leader, shards, blockers, retries and parked messages; then each shard's leader, what
    holds retention back (outbox.retention_status), and with a read database, its lag.

    Naming the sessions of other users that block a subscription needs pg_read_all_stats.
    """
    stale_after = DaemonOptions.retention_stale_after
    if retention_stale_after is not None:
        # Checked as the daemon checks it: a value it refuses is a usage error (exit 2).
        stale_after = DaemonOptions(
            retention_stale_after=retention_stale_after
        ).retention_stale_after
    read_url = given_read_database_url(context, read_database_url)
    with context.connect() as conn:
        rows = operations.status(conn, show_query=show_query)
        holders = operations.retention_holders(conn)
        archives = operations.archives(conn)
        replica = None
        if read_url is not None:
            replica = operations.read_replica(conn, read_url, rows, "outbox status")
    if as_json:
        print_json([status_document(row, replica) for row in rows])
        return
    print_status(rows)
    if show_query:
        print_blocking_queries(rows)
    if replica is not None:
        print_read_replica(replica, rows)
    for row in rows:
        if row.destination_unavailable is not None:
            console().print(
                cell(
                    f"{row.subscription}: its handler's destination cannot take messages,"
                    f" retrying: {row.destination_unavailable}"
                )
            )
    for archived in archives:
        console().print(cell(archive_line(archived)))
    print_oldest_holder(holders, stale_after)
