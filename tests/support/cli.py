"""Running the `outbox` command as a user would: a subprocess with its own environment."""

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.databases import PROJECT_ROOT

# The console script, as installed: unlike `python -m`, it does not put the current
# directory on sys.path by itself.
OUTBOX_SCRIPT = Path(sys.executable).parent / "outbox"


def outbox_environment(database_url: str | None, **environment: str) -> dict[str, str]:
    """This process's environment without its OUTBOX_ settings, then the database and
    `environment`: what an `outbox` process under test runs with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    if database_url is not None:
        env["OUTBOX_DATABASE_URL"] = database_url
    env.update(environment)
    return env


def outbox_command(
    arguments: Sequence[str],
    database_url: str | None,
    *,
    cwd: Path = PROJECT_ROOT,
    installed_script: bool = False,
    timeout: float = 120,
    variables: Mapping[str, str] | None = None,
    **environment: str,
) -> subprocess.CompletedProcess[str]:
    """`variables` and `environment` both set variables of its environment: a mapping a test
    was given as a parameter, or keywords."""
    program = [str(OUTBOX_SCRIPT)] if installed_script else [sys.executable, "-m", "outbox_cli"]
    return subprocess.run(
        [*program, *arguments],
        capture_output=True,
        text=True,
        env=outbox_environment(database_url, **(variables or {}), **environment),
        cwd=cwd,
        # No terminal, as in CI and scripts: a question must be refused, not waited on.
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def outbox_succeeds(database_url: str, *arguments: str) -> str:
    """Run `outbox ARGUMENTS`, assert it exits 0, and return its standard output."""
    done = outbox_command(arguments, database_url)
    assert done.returncode == 0, f"outbox {' '.join(arguments)}:\n{done.stdout}{done.stderr}"
    return done.stdout
