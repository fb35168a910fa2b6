"""`outbox migrate` and `outbox db ...`."""

import click

from outbox.database_url import mask_password
from outbox.names import DATABASE_URL_VARIABLE
from outbox.roles import DEFAULT_ROLE_PREFIX, role_names
from outbox_cli.context import CommandContext
from outbox_cli.printing import escaped


class _BadValueError(click.ClickException):
    exit_code = 2  # a usage error, as click's own; but one line, without the usage text


@click.command()
@click.option("--revision", default="head", show_default=True)
@click.option("--downgrade", is_flag=True, help="Go down to --revision (default: base).")
@click.option(
    "--role-prefix",
    default=DEFAULT_ROLE_PREFIX,
    show_default=True,
    help="Names the roles created or reused: PREFIX_writer, PREFIX_poller, PREFIX_reader"
    " (cluster-wide; a downgrade revokes theirs in this database and keeps them).",
)
@click.pass_obj
def migrate(context: CommandContext, revision: str, downgrade: bool, role_prefix: str) -> None:
    """Bring the outbox schema to a revision (idempotent)."""
    from outbox import (
        schema_migrations as migrations,  # alembic costs a second to import; only here
    )

    try:
        role_names(role_prefix)
    except ValueError as error:
        raise _BadValueError(str(error)) from None
    context.connect().close()  # a connection failure names the URL, not SQLAlchemy's wrapper
    try:
        if downgrade:
            target = "base" if revision == "head" else revision
            migrations.downgrade(context.database_url, target, role_prefix)
        else:
            migrations.upgrade(context.database_url, revision, role_prefix)
    except migrations.RevisionError as error:
        raise _BadValueError(str(error)) from None
    except migrations.SchemaMismatchError as error:
        raise click.ClickException(str(error)) from None
    current = migrations.current_revision(context.database_url)
    click.echo(f"outbox schema at revision {escaped(current or 'base')}")


@click.command()
@click.pass_obj
def rebase(context: CommandContext) -> None:
    """After a restore into another cluster: rewrite the stored transaction ids so delivery
    resumes (one transaction; refused while a daemon leads; writers wait meanwhile)."""
    from poller import operations

    with context.connect(autocommit=True) as conn:
        try:
            result = operations.rebase(conn)
        except operations.RebaseRefusedError as error:
            raise click.ClickException(f"rebase refused, nothing changed: {error}") from None
    if result is None:
        click.echo("nothing to rebase: no stored transaction id is ahead of this cluster")
        return
    advanced = f"; used up {result.advanced_by} ids first" if result.advanced_by else ""
    click.echo(
        f"rebased {result.restored_ids} restored and {result.written_here_ids} new transaction"
        f" ids onto {result.first_id} and up ({result.messages_rewritten} messages"
        f" rewritten{advanced}); every subscription's epoch was raised"
    )


@click.group()
def db() -> None:
    """The database the outbox lives in (and the embedded server used without a URL)."""


@db.command("url")
@click.option("--show-password", is_flag=True, help="Print the password instead of ***.")
@click.pass_obj
def url(context: CommandContext, show_password: bool) -> None:
    """Print the database URL (starting the embedded server if none is configured; it stops
    when this command exits unless `outbox db start` keeps it running)."""
    shown = context.database_url if show_password else mask_password(context.database_url)
    click.echo(escaped(shown))


def _configured_elsewhere(context: CommandContext, verb: str) -> bool:
    if context.database_url_option is not None:
        given = "--database-url is given"
    elif context.settings.database_url:
        given = f"{DATABASE_URL_VARIABLE} is set"
    else:
        return False
    click.echo(f"{given}, so the embedded server is not used: nothing to {verb}", err=True)
    return True


@db.command("start")
@click.pass_obj
def start(context: CommandContext) -> None:
    """Start the embedded server, leave it running and print its URL (for psql, scripts)."""
    if _configured_elsewhere(context, "start"):
        return
    from outbox_cli.embedded_server import start_kept_running

    click.echo(escaped(start_kept_running(context.settings.data_dir)))


@db.command("stop")
@click.pass_obj
def stop(context: CommandContext) -> None:
    """Stop the embedded server; later commands start it again and stop it when they exit."""
    if _configured_elsewhere(context, "stop"):
        return
    from outbox_cli import embedded_server

    stopped = embedded_server.stop(context.settings.data_dir)
    click.echo("embedded server stopped" if stopped else "embedded server was not running")


@db.command("status")
@click.pass_obj
def db_status(context: CommandContext) -> None:
    """Whether the embedded server runs, and its URL."""
    if _configured_elsewhere(context, "report"):
        return
    from outbox_cli import embedded_server

    data_dir = context.settings.data_dir
    info = embedded_server.running_server(data_dir)
    if info is None:
        click.echo(f"embedded server not running ({escaped(data_dir)})")
        return
    lifetime = (
        "kept running until `outbox db stop`"
        if embedded_server.kept_running(data_dir)
        else "stops when the last command using it exits"
    )
    click.echo(f"embedded server running, pid {info.pid}, {lifetime}: {escaped(info.get_uri())}")
