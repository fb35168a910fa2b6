"""Reading a Textual app's screen in tests: the text a person would see, line by line.

`screen_lines` renders the screen exactly as App.export_screenshot does (through the
compositor), but keeps the text instead of the SVG, so a test asserts on what is shown, not on
widget attributes. `wait_for_screen` polls it with a deadline; nothing is slept on blindly.
"""

import io
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot


def screen_lines(app: App[Any]) -> list[str]:
    width, height = app.size
    console = Console(
        width=width, height=height, file=io.StringIO(), record=True, force_terminal=True
    )
    # The compositor is what export_screenshot renders; Textual has no public text export.
    console.print(app.screen._compositor.render_update(full=True))
    return [line.rstrip() for line in console.export_text().splitlines()]


async def wait_for_screen(
    pilot: Pilot[Any], shown: Callable[[list[str]], bool], what: str, timeout: float = 20
) -> list[str]:
    """Let the app run until `shown(screen_lines)` holds; fail naming `what` and the screen."""
    deadline = time.monotonic() + timeout
    while True:
        lines = screen_lines(pilot.app)
        if shown(lines):
            return lines
        if time.monotonic() > deadline:
            screen = "\n".join(lines)
            raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{screen}")
        await pilot.pause(0.05)


def rows_starting_with(lines: list[str], *prefixes: str) -> list[str]:
    return [line for line in lines if line.startswith(prefixes)]
