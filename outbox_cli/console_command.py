"""`outbox console`: the operator console in a browser (the console extra)."""

from pathlib import Path

import click

from outbox_cli.context import CommandContext
from outbox_cli.database_options import given_read_database_url, read_database_url_option
from outbox_cli.errors import CommandUsageError
from poller.operations import quoted

# Written here rather than imported from outbox_console, so `outbox --help` works without the
# console extra; tests/unit/test_console_units.py keeps them equal to outbox_console.config's.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8400
DEFAULT_SAMPLE_INTERVAL = 5.0


def _root_path(_context: click.Context, _parameter: click.Parameter, value: str) -> str:
    if value and (not value.startswith("/") or value.endswith("/") or "//" in value):
        raise CommandUsageError(
            f"--root-path {quoted(value)} is not a path prefix like /outbox (a leading slash,"
            " no trailing one)"
        )
    return value


@click.command()
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="The address to listen on. Another than localhost serves the console to the network:"
    " put it behind a reverse proxy with TLS (README: The console).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Tokens that may act, one a line: `NAME: SECRET` (the action log names NAME) or"
    " `SECRET`. OUTBOX_CONSOLE_TOKEN adds one. Without any, the console is read-only.",
)
@click.option(
    "--root-path",
    default="",
    callback=_root_path,
    help="The path prefix a reverse proxy serves the console under (like /outbox); the proxy"
    " strips it before passing requests on.",
)
@click.option(
    "--forwarded-allow-ips",
    default="127.0.0.1",
    show_default=True,
    help="Proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (comma-separated).",
)
@click.option(
    "--sample-interval",
    type=click.FloatRange(0.2, 3600),
    default=DEFAULT_SAMPLE_INTERVAL,
    show_default=True,
    help="Seconds between two readings of the overview, and between two points of its charts.",
)
@read_database_url_option(
    "The read replica (hot standby) the daemons read messages from: the overview shows how far"
    " behind the database it is, and which subscriptions wait for its replay."
)
@click.pass_obj
def console(
    context: CommandContext,
    host: str,
    port: int,
    token_file: Path | None,
    root_path: str,
    forwarded_allow_ips: str,
    sample_interval: float,
    read_database_url: str | None,
) -> None:
    """Serve the operator console in a browser: every subscription, shard, parked message
    and publication, live; replay, purge, skip and seek, each after a confirmation, for
    whoever signs in with a token. Read-only otherwise, and always when the database role may
    not act."""
    # The console extra's packages, imported only when it runs (outbox_cli.errors names the
    # extra when they are missing).
    from outbox_console.config import ConsoleConfig
    from outbox_console.serve import serve
    from outbox_console.tokens import TOKEN_VARIABLE, configured_tokens

    secret = context.settings.console_token
    tokens = configured_tokens(None if secret is None else secret.get_secret_value(), token_file)
    with context.connect():
        pass  # a wrong URL or a refused login fails here, in one line, not on every page
    read_url = given_read_database_url(context, read_database_url)
    config = ConsoleConfig(
        context.database_url, tokens, sample_interval, read_database_url=read_url
    )
    if not tokens:
        click.echo(
            f"no token ({TOKEN_VARIABLE} or --token-file): the console is read-only", err=True
        )
    serve(config, host, port, root_path=root_path, forwarded_allow_ips=forwarded_allow_ips)
