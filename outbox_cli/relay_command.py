"""`outbox relay`: the daemon with a relay as its handler (see the `relays` package)."""

import asyncio
from pathlib import Path

import click

import outbox_relays
from outbox.names import environment_variable
from outbox_cli.context import CommandContext
from outbox_cli.database_options import given_read_database_url
from outbox_cli.errors import CommandUsageError
from outbox_cli.log_format import use_log_format
from outbox_cli.poll_commands import daemon_command, serve
from outbox_cli.poll_config import read_poll_config

RELAY_TO_VARIABLE = environment_variable("relay_to")


@click.command()
@click.option(
    "--to",
    "url",
    help="Where to publish: nats://, redis://, amqp://, http(s):// with the target's settings"
    " as query parameters (docs/how-to/relays.md). Any other user of this host can read a command"
    f" line: give a URL with credentials through --to-file or {RELAY_TO_VARIABLE}."
    f" [required: here, --to-file, {RELAY_TO_VARIABLE} or `to` in --config]",
)
@click.option(
    "--to-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding the --to URL (a mounted secret, say), read at start.",
)
@click.option(
    "--declare",
    is_flag=True,
    default=None,
    help="Create the stream, exchange or queue --to names when it is missing.",
)
@daemon_command("a `[relay]` table (`to`, `declare`)")
@click.pass_obj
def relay(
    context: CommandContext,
    /,
    url: str | None,
    to_file: Path | None,
    declare: bool | None,
    subscriptions: tuple[str, ...],
    config: Path | None,
    log_format: str,
    read_database_url: str | None,
    **option_values: float | None,
) -> None:
    """Publish every committed message of the subscriptions to a broker or a webhook.

    A message is finished only once the broker confirmed it. While the broker is down or
    misses what --to names, the relay retries with backoff and parks nothing; a message the
    broker refuses for good is parked with the broker's reason.

    \b
    Example:
      outbox relay --subscription to-nats --to 'nats://127.0.0.1:4222?subject=orders.{message_type}'
    """
    use_log_format(log_format)
    names = list(subscriptions)
    url = _given_url(url, to_file) or context.settings.relay_to
    if config is not None:
        document = read_poll_config(config)
        names += document.subscriptions
        if document.relay is not None:
            url = url or document.relay.to
            declare = document.relay.declare if declare is None else declare
    if not names:
        raise click.UsageError("name a --subscription (or list them in --config)")
    if url is None:
        raise click.UsageError(
            f"name a --to URL (or --to-file, {RELAY_TO_VARIABLE}, or `to` in the config's"
            " [relay] table)"
        )
    relay_handler = outbox_relays.handler(url, declare=bool(declare))
    asyncio.run(relay_handler.check())
    registry = relay_handler.metrics.registry
    serve(
        context,
        names,
        relay_handler,
        option_values,
        [registry],
        [relay_handler.close],
        read_database_url=given_read_database_url(context, read_database_url),
    )


def _given_url(url: str | None, to_file: Path | None) -> str | None:
    """--to, or the URL --to-file holds (the error names the file, never its content)."""
    if to_file is None:
        return url
    if url is not None:
        raise CommandUsageError("give --to or --to-file, not both")
    try:
        text = to_file.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        raise CommandUsageError(f"--to-file {to_file}: cannot read it: {error}") from None
    if not text or len(text.splitlines()) > 1:
        raise CommandUsageError(f"--to-file {to_file}: it must hold one URL on one line")
    return text
