"""Turning every error a command meets into one masked, escaped line and an exit code.

The translation lives in one place, `OutboxGroup.invoke`, instead of a try/except in every
command. One rule for every command:

- 2, a usage error: the command as typed can never work, whatever the database holds. An
  unknown command or option, a missing or contradicting option, a value malformed or out of
  its range (a position, a count, a name, a time, a setting, a handler, a URL, a config
  file), a confirmation the command cannot ask for (no terminal, no --yes). Nothing was done.
- 1, a failure: the command was well formed but could not be done now. The database (cannot
  connect, not migrated, an error), something named that does not exist (a subscription, a
  message, a parked message), a state that refuses it (the name is taken, a change of the
  shard count drains, a position not reached yet or already passed, retired messages), a
  daemon that stopped with handlers still running, or anything unexpected.

Anything unexpected still prints one line, not a traceback.
"""

import logging
import tomllib
from typing import Any

import click
import psycopg
import pydantic

from outbox.archive.errors import ArchiveError, ArchiveRefusedError, ArchiveVersionError
from outbox.database_url import mask_password
from outbox_cli.extras import missing_extra, needs_extra_line
from outbox_cli.printing import escaped
from poller.daemon import HandlerNotFoundError
from poller.operations import (
    NotPollableError,
    RefusedValueError,
    RestoredDatabaseError,
    SubscriptionError,
)

log = logging.getLogger(__name__)

# Error lines longer than this keep their start and end: the value and the reason.
_LINE_LIMIT = 400


class DatabaseConnectionError(Exception):
    """Connecting failed; carries the URL (password masked) so the error can name it."""

    def __init__(self, masked_url: str, cause: Exception) -> None:
        self.cause = cause
        super().__init__(f"cannot connect to the database {masked_url}: {cause}")


class CommandError(click.ClickException):
    """A runtime error, printed as one masked and escaped line (exit 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class CommandUsageError(click.UsageError):
    """A refused value (exit 2), printed as one line without the usage banner."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def one_line(message: str) -> str:
    """Masked, joined onto one line, escaped and cut to a readable length."""
    lines = (line.strip() for line in mask_password(message).splitlines())
    text = escaped("; ".join(line for line in lines if line))
    if len(text) > _LINE_LIMIT:
        half = _LINE_LIMIT // 2
        text = f"{text[:half]} ... {text[-half:]}"
    return text


def _schema_missing(error: psycopg.Error) -> bool:
    missing = (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)
    return isinstance(error, missing) and "outbox" in str(error)


def validation_text(error: pydantic.ValidationError, source: str) -> str:
    """`source: key: what is wrong (got value)`, for each refused key."""
    problems = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"]) or "(document)"
        value = repr(problem["input"])
        if len(value) > 60:
            value = value[:57] + "..."
        problems.append(f"{where}: {problem['msg']} (got {value})")
    return f"{source}: " + "; ".join(problems)


def translated(error: Exception) -> click.ClickException:
    """The CLI error for `error`; see the module docstring for the exit codes."""
    if isinstance(error, RefusedValueError | ArchiveRefusedError | ArchiveVersionError):
        return CommandUsageError(str(error))
    if isinstance(error, ArchiveError):
        return CommandError(str(error))
    if isinstance(
        error,
        DatabaseConnectionError | SubscriptionError | NotPollableError | RestoredDatabaseError,
    ):
        return CommandError(str(error))
    if isinstance(error, psycopg.Error):
        if _schema_missing(error):
            return CommandError(
                f"the outbox schema is not installed: run `outbox migrate` ({error})"
            )
        return CommandError(f"database error: {error}")
    if isinstance(error, tomllib.TOMLDecodeError):
        return CommandUsageError(f"the config file is not valid TOML: {error}")
    if isinstance(error, pydantic.ValidationError):
        return CommandUsageError(validation_text(error, "settings"))
    if isinstance(error, HandlerNotFoundError | ValueError):
        return CommandUsageError(str(error))
    if isinstance(error, OSError):
        return CommandError(str(error))
    log.debug("unexpected error", exc_info=error)
    return CommandError(
        f"unexpected {type(error).__name__}: {error} (run with --log-level DEBUG for the traceback)"
    )


class OutboxGroup(click.Group):
    """The top-level group: every subcommand's exceptions pass through `translated`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as error:
            # Click's own errors quote what the user typed; mask and escape that too.
            # (`message` is typed Final, but click formats the rest of its output around it.)
            setattr(error, "message", one_line(error.message))  # noqa: B010
            if isinstance(error, CommandUsageError):
                # Click attaches the command to a usage error raised inside it, and then prints
                # its usage banner around the line; ours name the value and stay one line.
                error.ctx = None
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except ModuleNotFoundError as error:
            # A command imports what its extra installs only when it runs (the tui's screen,
            # the relays' clients, Spark, the embedded server), so `outbox --help` and the
            # other commands work without it.
            extra = missing_extra(error)
            if extra is None:
                raise translated(error) from None
            command = f"outbox {ctx.invoked_subcommand}"
            raise CommandUsageError(needs_extra_line(command, extra)) from None
        except Exception as error:
            raise translated(error) from None
