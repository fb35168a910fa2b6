"""Every `outbox` command line in the shell blocks of the README, the docs site's pages and
outbox_spark/README.md parses against the CLI itself, so
a renamed command, option or job (the README once named the Spark job `message_type_counts`,
which the command refused) fails here rather than for a reader."""

import re
import shlex
from pathlib import Path

import click
import pytest

from outbox_cli.main import cli
from outbox_spark.jobs import load_job
from tests.support import documentation

PROJECT = Path(__file__).resolve().parents[2]
READMES = [*documentation.pages(), PROJECT / "outbox_spark" / "README.md"]
SHELL_BLOCK = re.compile(r"```(?:sh|bash|shell)\n(.*?)```", re.S)
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def outbox_command_lines(text: str) -> list[str]:
    """The `outbox ...` commands of the shell blocks, without comments, variables set before
    them, or the other commands of a pipeline, a list or a `$(...)`."""
    found = []
    for block in SHELL_BLOCK.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            # Quoted words stay whole; `( ) | ; &` come as tokens of their own, between commands.
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            command: list[str] = []
            for token in [*lexer, ";"]:
                if token and set(token) <= set("();<>|&"):
                    while command and ASSIGNMENT.match(command[0]):
                        command = command[1:]  # `URL=$`, `OUTBOX_DATABASE_URL=... outbox`
                    # `...` stands for arguments left out: such a line shows a shape only.
                    if command[:1] == ["outbox"] and "..." not in command:
                        found.append(shlex.join(command))
                    command = []
                else:
                    command.append(token)
    return found


def parsed(arguments: list[str]) -> click.Context:
    """The context of the command `arguments` name, parsed as `outbox` would parse them (a
    missing required option, an unknown one or a refused value raises), without running it."""
    context = cli.make_context("outbox", list(arguments))
    while isinstance(context.command, click.Group):
        # As click's own completion walks commands: the group keeps what follows it here.
        rest = [*context._protected_args, *context.args]
        name, command, rest = context.command.resolve_command(context, rest)
        assert command is not None
        assert name is not None
        context = command.make_context(name, rest, parent=context)
    return context


COMMANDS = [line for readme in READMES for line in outbox_command_lines(readme.read_text())]


def test_the_readme_has_command_lines_to_check() -> None:
    assert len(COMMANDS) >= 20
    assert "outbox poll --subscription billing --handler myapp.handlers:on_order" in COMMANDS
    assert any(line.startswith("outbox spark run message-type-counts") for line in COMMANDS)


def check(line: str) -> None:
    """Raise as `outbox` would refuse `line` before doing anything."""
    context = parsed(shlex.split(line)[1:])
    if context.command.name == "run" and context.parent and context.parent.command.name == "spark":
        # The job parses its own arguments (argparse exits 2 on a refused one, 0 for --help).
        job = load_job(context.params["job"].replace("_", "-"))
        try:
            job.argument_parser().parse_args(context.params["job_arguments"])
        except SystemExit as done:
            if done.code != 0:
                raise


@pytest.mark.parametrize("line", COMMANDS)
def test_a_readme_command_line_parses_against_the_cli(line: str) -> None:
    check(line)


SPARK_JOB = "outbox spark run message_type_counts --publication orders --subscription counts"


def test_a_spark_job_line_is_checked_by_the_job_too() -> None:
    check(f"{SPARK_JOB} --output out --checkpoint checkpoint")


@pytest.mark.parametrize(
    "line",
    [
        "outbox pol --subscription billing",
        "outbox poll --subscriptions billing --handler app:on_order",
        "outbox subscription create billing",  # --publication is required
        "outbox seek billing --to-position 12",
        "outbox spark run message-counts",
        SPARK_JOB,  # --output and --checkpoint are required
    ],
)
def test_a_wrong_command_line_is_caught(line: str) -> None:
    with pytest.raises((click.UsageError, SystemExit, KeyError)):  # KeyError: no such job
        check(line)


def test_command_lines_are_found_in_comments_pipes_and_substitutions() -> None:
    text = "\n".join(
        [
            "```sh",
            "URL=$(outbox db start)      # starts it",
            "outbox tail --publication orders --plain | head -2",
            "OUTBOX_DATABASE_URL=postgresql://u@db/x outbox poll --subscription b --handler a:f",
            "psql -c 'SELECT 1'",
            "```",
        ]
    )
    assert outbox_command_lines(text) == [
        "outbox db start",
        "outbox tail --publication orders --plain",
        "outbox poll --subscription b --handler a:f",
    ]
