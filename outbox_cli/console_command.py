"""`outbox console`: the operator console in a browser (the console extra)."""

from pathlib import Path

import click
from pydantic import SecretStr

from outbox_cli.context import CommandContext
from outbox_cli.database_options import given_read_database_url, read_database_url_option
from outbox_cli.errors import CommandUsageError
from outbox_console.defaults import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_SAMPLE_INTERVAL
from poller.operations import quoted


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
    " put it behind a reverse proxy with TLS (docs/how-to/console.md); without a token it is"
    " refused unless --serve-without-token.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Tokens to sign in with, one a line: `NAME: SECRET` or `operator NAME: SECRET` (may"
    " read messages and act), `reader NAME: SECRET` (may read messages), or a bare `SECRET`"
    " (an operator); the logs name NAME. OUTBOX_CONSOLE_TOKEN adds an operator's,"
    " OUTBOX_CONSOLE_READER_TOKEN a reader's. Without signing in, a visitor sees where"
    " subscriptions stand and no message.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help="A name the console answers to besides the address it listens on (and localhost when"
    " that is local): the name a reverse proxy passes on in Host. Repeat it for more; a"
    " request for another name is refused (DNS rebinding).",
)
@click.option(
    "--serve-without-token",
    is_flag=True,
    help="Listen on an address other than localhost with no token configured: anybody who"
    " reaches it sees where subscriptions stand.",
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
    default="",
    help="Proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (comma-separated"
    " addresses, like 127.0.0.1 for a proxy on this machine); by default nobody's.",
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
    allowed_hosts: tuple[str, ...],
    serve_without_token: bool,
    root_path: str,
    forwarded_allow_ips: str,
    sample_interval: float,
    read_database_url: str | None,
) -> None:
    """Serve the operator console in a browser: every subscription, shard and publication,
    live; parked messages and a publication's tail for whoever signs in with a token; replay,
    purge, skip and seek, each after a confirmation, for an operator's token, and never when
    the database role may not act."""
    # The console extra's packages, imported only when it runs (outbox_cli.errors names the
    # extra when they are missing).
    from outbox_console import hosts
    from outbox_console.config import ConsoleConfig
    from outbox_console.serve import serve
    from outbox_console.tokens import READER_TOKEN_VARIABLE, TOKEN_VARIABLE, configured_tokens

    settings = context.settings
    tokens = configured_tokens(
        _secret(settings.console_token), token_file, _secret(settings.console_reader_token)
    )
    no_token = f"no token ({TOKEN_VARIABLE}, {READER_TOKEN_VARIABLE} or --token-file)"
    if not tokens and not hosts.is_loopback(host) and not serve_without_token:
        raise CommandUsageError(
            f"--host {quoted(host)} serves the console beyond this machine, and there is"
            f" {no_token}: configure one, or give --serve-without-token to serve it anyway"
        )
    with context.connect():
        pass  # a wrong URL or a refused login fails here, in one line, not on every page
    read_url = given_read_database_url(context, read_database_url)
    config = ConsoleConfig(
        context.database_url,
        tokens,
        sample_interval,
        read_database_url=read_url,
        allowed_hosts=hosts.allowed_hosts(host, allowed_hosts),
        forwarded_allow_ips=tuple(
            ip.strip() for ip in forwarded_allow_ips.split(",") if ip.strip()
        ),
    )
    if not tokens:
        click.echo(
            f"{no_token}: visitors see where subscriptions stand, no message, and nobody acts",
            err=True,
        )
    serve(config, host, port, root_path=root_path)


def _secret(value: SecretStr | None) -> str | None:
    return None if value is None else value.get_secret_value()
