"""Running the `outbox` command as a user would: a subprocess with its own environment."""

import os
import subprocess
import sys
from collections.abc import Sequence

from tests.support.databases import PROJECT_ROOT


def outbox_command(
    arguments: Sequence[str], database_url: str | None, **environment: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    if database_url is not None:
        env["OUTBOX_DATABASE_URL"] = database_url
    env.update(environment)
    return subprocess.run(
        [sys.executable, "-m", "poller.cli", *arguments],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=120,
        check=False,
    )
