"""The `outbox` command."""

import logging

import click

from operations.cli.context import CommandContext
from operations.cli.database_commands import db, migrate, rebase
from operations.cli.demo_command import demo
from operations.cli.errors import CommandUsageError, OutboxGroup
from operations.cli.log_format import log_handler
from operations.cli.message_commands import message
from operations.cli.poll_commands import poll, status
from operations.cli.prune_command import prune
from operations.cli.relay_command import relay
from operations.cli.skip_command import skip
from operations.cli.spark_command import spark
from operations.cli.subscription_commands import parked, seek, subscription
from operations.cli.tail_command import tail
from operations.settings import command_line_settings
from outbox.database_url import PasswordMaskingFilter
from poller.administration import quoted

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@click.group(cls=OutboxGroup)
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
            f"OUTBOX_LOG_LEVEL {quoted(settings.log_level)} is not one of {', '.join(LOG_LEVELS)}"
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


def main() -> None:
    cli()
