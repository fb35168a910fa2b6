"""`outbox migrate` and `outbox db ...`."""

import click

from poller.cli.context import CommandContext
from poller.database.urls import mask_password


@click.command()
@click.option("--revision", default="head", show_default=True)
@click.option("--downgrade", is_flag=True, help="Go down to --revision (default: base).")
@click.pass_obj
def migrate(context: CommandContext, revision: str, downgrade: bool) -> None:
    """Bring the outbox schema to a revision (idempotent)."""
    from poller.database import migrations  # alembic costs a second to import; only here

    if downgrade:
        target = "base" if revision == "head" else revision
        migrations.downgrade(context.database_url, target)
    else:
        migrations.upgrade(context.database_url, revision)
    current = migrations.current_revision(context.database_url)
    click.echo(f"outbox schema at revision {current or 'base'}")


@click.group()
def db() -> None:
    """The database the outbox lives in."""


@db.command("url")
@click.option("--show-password", is_flag=True, help="Print the password instead of ***.")
@click.pass_obj
def url(context: CommandContext, show_password: bool) -> None:
    """Print the database URL (starting the embedded server if none is configured)."""
    click.echo(context.database_url if show_password else mask_password(context.database_url))
