"""The `outbox` console script. The wheel installs it whatever extras were chosen, so before
the command line (click, rich, pydantic-settings: the cli extra) is imported it makes sure
they are there, and says which extra to install when they are not."""

from outbox_cli.extras import exit_needing_extra


def main() -> None:
    try:
        from outbox_cli.main import main as run_command_line
    except ModuleNotFoundError as error:
        exit_needing_extra("outbox", error)
    run_command_line()
