"""Printing values that come from users or the database.

Names, errors, types, hosts and queries are whatever someone typed: they are printed as text,
never as rich markup (`[/]` in a name would make every listing fail), and their control
characters are shown escaped (`\\x1b` as the four characters `\\x1b`), so a value cannot drive
the operator's terminal.
"""

import datetime
import re
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# C0 and C1 controls, DEL, the line and paragraph separators and the bidirectional overrides
# (which can make a name read backwards).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escaped(value: object) -> str:
    """`value` as text with every unprintable character written as its Python escape."""
    return _UNPRINTABLE.sub(
        lambda match: match[0].encode("unicode_escape").decode("ascii"), str(value)
    )


def cell(value: object) -> Text:
    """A table cell or a line for rich: literal text, never parsed as markup."""
    return Text(escaped(value))


def time_text(at: datetime.datetime) -> str:
    """A time to the second, with its offset: `2026-11-27 06:31:55+0000`."""
    return f"{at:%Y-%m-%d %H:%M:%S%z}"


def table(columns: tuple[str, ...], **options: Any) -> Table:
    """A table whose cells wrap instead of being cut with an ellipsis: a cut name or position
    cannot be copied into the next command."""
    shown = Table(**options)
    for column in columns:
        shown.add_column(column, overflow="fold")
    return shown


def console() -> Console:
    # Piped output (scripts, grep) gets wide lines rather than rich's 80 columns.
    width = None if sys.stdout.isatty() else 200
    # highlight=False: rich would otherwise colour numbers and quotes inside names.
    return Console(width=width, highlight=False, emoji=False)
