"""The `outbox` console script. The wheel installs it whatever extras were chosen, so before
the command line (click, rich, pydantic-settings: the cli extra) is imported it makes sure
they are there, and says which extra to install when they are not. First of all, it makes
sure the import path finds our own packages, not an application's module of the same name
(outbox/shadowed_packages.py)."""

import sys

from outbox_cli.extras import exit_needing_extra


def main() -> None:
    _refuse_shadowed_packages()
    try:
        from outbox_cli.main import main as run_command_line
    except ModuleNotFoundError as error:
        exit_needing_extra("outbox", error)
    run_command_line()


def _refuse_shadowed_packages() -> None:
    try:
        from outbox.shadowed_packages import shadowing_line, shadowing_module
    except ImportError:  # `outbox` itself is another module, which has none of ours
        shadowing = getattr(sys.modules.get("outbox"), "__file__", None) or "another outbox"
        print(
            f"Error: {shadowing} is a module named outbox, the name of outbox-poller's own"
            " package: rename yours (and its imports), e.g. to app_outbox",
            file=sys.stderr,
        )
        sys.exit(2)
    if module := shadowing_module(sys.path):
        print(f"Error: {shadowing_line(module)}", file=sys.stderr)
        sys.exit(2)
