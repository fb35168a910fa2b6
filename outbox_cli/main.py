"""The `outbox` command."""

import logging

import click

from outbox.database_url import PasswordMaskingFilter
from outbox.names import environment_variable
from outbox_cli.archive_command import archive
from outbox_cli.console_command import console
from outbox_cli.context import CommandContext
from outbox_cli.database_commands import db, migrate, rebase
from outbox_cli.database_options import add_database_url_option
from outbox_cli.demo_command import demo
from outbox_cli.errors import CommandUsageError, OutboxGroup
from outbox_cli.log_format import log_handler
from outbox_cli.message_commands import message
from outbox_cli.poll_commands import poll, status
from outbox_cli.prune_command import prune
from outbox_cli.relay_command import relay
from outbox_cli.settings import command_line_settings
from outbox_cli.skip_command import skip
from outbox_cli.spark_command import spark
from outbox_cli.subscription_commands import parked, seek, subscription
from outbox_cli.tail_command import tail
from poller.operations import quoted

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.group(cls=OutboxGroup)
@click.version_option(package_name="outbox-poller", prog_name="outbox")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default=None,
    help="Overrides OUTBOX_LOG_LEVEL.",
)
@click.pass_context
def cli(context: click.Context, log_level: str | None) -> None:
    """A PostgreSQL transactional outbox and the poller that delivers it."""
    settings = command_line_settings()
    level = (log_level or settings.log_level).upper()
    if level not in LOG_LEVELS:
        raise CommandUsageError(
            f"{environment_variable('log_level')} {quoted(settings.log_level)} is not one of"
            f" {', '.join(LOG_LEVELS)}"
        )
    handler = log_handler()
    handler.addFilter(PasswordMaskingFilter())
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("alembic").setLevel(logging.WARNING)
    context.obj = CommandContext(settings)


cli.add_command(migrate)
cli.add_command(rebase)
cli.add_command(db)
cli.add_command(demo)
for command in (subscription, poll, relay, status, seek, skip, parked, message, spark, tail):
    cli.add_command(command)
cli.add_command(prune)
cli.add_command(archive)
cli.add_command(console)
add_database_url_option(cli)  # after every command is added: each takes --database-url


def main() -> None:
    cli()
