"""The `outbox` command."""

import logging

import click

from poller.cli.context import CommandContext
from poller.cli.database_commands import db, migrate
from poller.cli.demo_command import demo
from poller.cli.poll_commands import poll, status
from poller.cli.spark_command import spark
from poller.cli.subscription_commands import parked, seek, subscription
from poller.database.urls import PasswordMaskingFilter
from poller.settings import poller_settings


@click.group()
@click.option("--log-level", default=None, help="DEBUG, INFO, WARNING... (OUTBOX_LOG_LEVEL)")
@click.pass_context
def cli(context: click.Context, log_level: str | None) -> None:
    """A PostgreSQL transactional outbox and the poller that delivers it."""
    settings = poller_settings()
    handler = logging.StreamHandler()
    handler.addFilter(PasswordMaskingFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=(log_level or settings.log_level).upper(), handlers=[handler])
    logging.getLogger("alembic").setLevel(logging.WARNING)
    context.obj = CommandContext(settings)


cli.add_command(migrate)
cli.add_command(db)
cli.add_command(demo)
for command in (subscription, poll, status, seek, parked, spark):
    cli.add_command(command)


def main() -> None:
    cli()
