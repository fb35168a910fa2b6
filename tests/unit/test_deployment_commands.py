"""Every command the compose file and the image run is one the CLI takes: the command exists,
its options exist and its required options are given. There is no Docker engine here, so a
renamed command or option would otherwise show only on a platform team's first deploy."""

import json
import re
import shlex
import warnings
from typing import Any

import click
import pytest
import yaml

from outbox_cli.main import cli
from poller.daemon.options import DaemonOptions
from poller.daemon.runner import STOP_ALLOWANCE
from tests.support.databases import PROJECT_ROOT

COMPOSE_FILE = PROJECT_ROOT / "docker-compose.yml"
DOCKERFILE = PROJECT_ROOT / "Dockerfile"

# ${NAME:-default} and ${NAME-default}: compose's interpolation, taken at its default.
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?::?-(?P<default>[^}]*))?\}")


def interpolated(value: str) -> str:
    return _VARIABLE.sub(lambda match: match["default"] or "", value)


def dockerfile_instruction(name: str) -> list[str]:
    """The JSON (exec) form of the Dockerfile's last `name` instruction."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith(f"{name} ")]
    assert lines, f"the Dockerfile has no {name}"
    form = json.loads(lines[-1].removeprefix(f"{name} "))
    assert isinstance(form, list), f"{name} is not in the exec form: {lines[-1]}"
    return [str(part) for part in form]


def compose_commands() -> dict[str, list[str]]:
    """Each service built from this Dockerfile, with the arguments its `command:` gives the
    image's entrypoint."""
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    commands = {}
    for name, service in services.items():
        if "build" not in service:
            continue  # another image (postgres)
        command = service.get("command", dockerfile_instruction("CMD"))
        arguments = shlex.split(command) if isinstance(command, str) else command
        commands[name] = [interpolated(str(argument)) for argument in arguments]
    return commands


def parse(arguments: list[str]) -> click.Context:
    """Parse `outbox ARGUMENTS` as click would, down to the command, without running it; a
    missing command, an unknown option or a missing required one raises click's error."""
    context = cli.make_context("outbox", list(arguments))
    command: click.Command = cli
    while isinstance(command, click.Group):
        with warnings.catch_warnings():
            # Click 8.2 deprecated protected_args (the subcommand's name): Click 9 moves it into
            # args. Until then it is where the name is.
            warnings.simplefilter("ignore", DeprecationWarning)
            remaining = [*context.protected_args, *context.args]
        name, found, rest = command.resolve_command(context, remaining)
        assert found is not None
        assert name is not None
        context = found.make_context(name, rest, parent=context)
        command = found
    return context


def test_the_image_runs_the_outbox_command() -> None:
    assert dockerfile_instruction("ENTRYPOINT") == ["outbox"]


def test_the_compose_file_runs_the_image_it_builds() -> None:
    # Without a service built from the Dockerfile, the tests below would check nothing.
    assert {"poller", "daemon"} <= compose_commands().keys()


@pytest.mark.parametrize(("service", "arguments"), sorted(compose_commands().items()))
def test_every_compose_command_is_one_the_cli_takes(service: str, arguments: list[str]) -> None:
    try:
        parse(arguments)
    except click.ClickException as error:
        pytest.fail(f"service {service}: outbox {shlex.join(arguments)}: {error.format_message()}")


def test_the_images_default_command_is_one_the_cli_takes() -> None:
    with pytest.raises(click.exceptions.Exit) as ended:  # --help prints and ends
        parse(dockerfile_instruction("CMD"))
    assert ended.value.exit_code == 0


@pytest.mark.parametrize(
    ("arguments", "refused"),
    [
        (["pol", "--subscription", "s"], "No such command 'pol'"),
        (["poll", "--subscriptions", "s"], "No such option '--subscriptions'"),
        (["subscription", "create", "s"], "Missing option '--publication'"),
    ],
)
def test_a_renamed_command_or_option_or_a_missing_required_one_is_caught(
    arguments: list[str], refused: str
) -> None:
    """The check itself can fail: each of these is what a rename would leave in the file."""
    with pytest.raises(click.ClickException) as error:
        parse(arguments)
    assert refused in error.value.format_message()


def test_the_compose_daemon_passes_the_port_its_health_check_asks() -> None:
    service = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["daemon"]
    context = parse(compose_commands()["daemon"])
    port = context.params["metrics_port"]
    assert port is not None, "the daemon serves no /readyz for its health check"
    assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])
    assert any(str(mapping).endswith(f":{port}") for mapping in service.get("ports", []))


def test_the_compose_daemon_is_restarted_and_given_the_time_its_stop_takes() -> None:
    """Docker's default grace period is 10 s, then SIGKILL: a stop takes up to
    --shutdown-timeout plus STOP_ALLOWANCE (13 s by default), so the final checkpoint and the
    lease release would be cut short."""
    service = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["daemon"]
    options = parse(compose_commands()["daemon"]).params
    shutdown_timeout = options["shutdown_timeout"] or DaemonOptions.shutdown_timeout
    grace = service.get("stop_grace_period", "10s")
    assert re.fullmatch(r"\d+s", grace), f"stop_grace_period {grace!r}: write it in seconds"
    assert int(grace.removesuffix("s")) > shutdown_timeout + STOP_ALLOWANCE
    assert service.get("restart") in ("always", "unless-stopped", "on-failure")
