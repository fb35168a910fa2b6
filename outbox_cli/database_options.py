"""--database-url on every command, --embedded-database on the daemons, and
--read-database-url (a hot standby) on the daemons and `outbox status`.

Without a URL the commands start an embedded PostgreSQL, which is what trying them wants. A
daemon does so only when asked: a deployment that lost OUTBOX_DATABASE_URL would otherwise
poll an empty local database and report itself healthy.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from outbox.names import DATABASE_URL_VARIABLE, environment_variable
from outbox_cli.context import CommandContext, DatabaseNotGivenError
from poller.daemon import DaemonOptions

READ_DATABASE_URL_VARIABLE = environment_variable("read_database_url")

DATABASE_URL_HELP = (
    f"The PostgreSQL URL; overrides {DATABASE_URL_VARIABLE}. Any other user of this host can"
    " read a command line, so give a password through the variable."
)


def add_database_url_option(command: click.Command) -> None:
    """Give `command`, or every command of a group and of its groups, --database-url."""
    if isinstance(command, click.Group):
        for subcommand in command.commands.values():
            add_database_url_option(subcommand)
        return
    command.params.append(
        click.Option(
            ["--database-url"],
            metavar="URL",
            expose_value=False,
            # Eager: taken before any other option's callback, so --embedded-database's check
            # sees it wherever it stands on the command line.
            is_eager=True,
            callback=_remember_database_url,
            help=DATABASE_URL_HELP,
        )
    )


def _remember_database_url(ctx: click.Context, _: click.Parameter, url: str | None) -> None:
    context = ctx.find_object(CommandContext)
    if url is not None and url.strip() and context is not None:  # blank: not given, as empty
        context.database_url_option = url


def embedded_database_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--embedded-database, for a daemon: without it and without a URL, the daemon refuses."""
    return click.option(
        "--embedded-database",
        is_flag=True,
        expose_value=False,
        callback=_require_database,
        help="Without --database-url or OUTBOX_DATABASE_URL, start (or join) the embedded"
        " PostgreSQL under OUTBOX_DATA_DIR; without this flag the daemon refuses to start.",
    )(command)


def _require_database(ctx: click.Context, _: click.Parameter, embedded: bool) -> None:
    # Refused while the options are read, before a handler is imported or a broker reached.
    context = ctx.find_object(CommandContext)
    if embedded or context is None or context.configured_database_url is not None:
        return
    raise DatabaseNotGivenError(
        f"outbox {ctx.info_name} needs a database: pass --database-url or set"
        f" {DATABASE_URL_VARIABLE} (or --embedded-database to start the embedded PostgreSQL"
        f" under {context.settings.data_dir})"
    )


def read_database_url_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--read-database-url URL, else OUTBOX_READ_DATABASE_URL (given_read_database_url)."""
    return click.option(
        "--read-database-url",
        metavar="URL",
        help=f"{help_text} Overrides {READ_DATABASE_URL_VARIABLE}; give a password through the"
        " variable.",
    )


DAEMON_READ_HELP = next(
    field.metadata["help"]
    for field in dataclasses.fields(DaemonOptions)
    if field.name == "read_database_url"
)


def given_read_database_url(context: CommandContext, option: str | None) -> str | None:
    """The hot standby a command was given: the option, else the variable; None for none."""
    return option or context.settings.read_database_url
