"""`outbox archive delete`: a publication's archive in the lake, deleted for good (written by
`outbox spark archive`; deleting needs the archive extra, for its files)."""

import sys

import click

from outbox_cli.context import CommandContext
from outbox_cli.errors import CommandUsageError
from outbox_cli.printing import cell, console, escaped
from poller import operations


@click.group()
def archive() -> None:
    """A publication's archive (see `outbox spark archive`)."""


@archive.command("delete")
@click.option("--publication", required=True, help="The publication whose archive goes.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def delete(context: CommandContext, publication: str, yes: bool) -> None:
    """Delete PUBLICATION's archive for good: its ranges in the database, then its files
    (URI/publication=P). Retention stops waiting for it; what it dropped before is gone,
    and a reader below the retired-up-to mark is refused again. The next `outbox spark
    archive` begins a new archive after the retired-up-to mark. Asks first unless --yes."""
    if not yes:
        if not sys.stdin.isatty():
            raise CommandUsageError(
                "refusing to delete an archive without confirmation: pass --yes (no terminal)"
            )
        click.confirm(f"delete the archive of {escaped(publication)} for good?", abort=True)
    with context.connect(autocommit=True) as conn:
        uri = operations.delete_archive(conn, publication)
    console().print(cell(f"deleted the archive of {publication} at {uri}"))
