"""Running `outbox` as if some packages were not installed: a child process whose import system
refuses them exactly as a virtualenv without them would (ModuleNotFoundError naming the
module). The installed wheel's own test (tests/acceptance/test_installed_wheel.py) runs in real
virtualenvs; this is the quick check of each extra's line."""

import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.support.cli import outbox_environment
from tests.support.databases import PROJECT_ROOT

_REFUSING = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in MISSING:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def python_without(missing: Iterable[str], code: str) -> str:
    """`code`, run after the packages `missing` (top-level import names) are made absent."""
    return f"MISSING = {sorted(missing)!r}\n{_REFUSING}\n{code}"


def outbox_without(
    missing: Iterable[str],
    arguments: Sequence[str],
    database_url: str | None,
    *,
    cwd: Path = PROJECT_ROOT,
    **environment: str,
) -> subprocess.CompletedProcess[str]:
    """`outbox ARGUMENTS` through the console script's entry point, without `missing`."""
    code = python_without(missing, "from outbox_cli.launcher import main\nmain()")
    return subprocess.run(
        [sys.executable, "-c", code, *arguments],
        capture_output=True,
        text=True,
        env=outbox_environment(database_url, **environment),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
