"""Writer limits, read from the environment once (OUTBOX_* variables).

Read with the standard library, the one place settings are not read with pydantic-settings
(poller/environment.py): an application that only appends installs psycopg and nothing else,
and pydantic-settings comes with the daemon's extra.
"""

import os
from dataclasses import dataclass
from functools import cache

from outbox.errors import WriterSettingsError
from outbox.names import environment_variable

MAX_PAYLOAD_BYTES_VARIABLE = environment_variable("max_payload_bytes")


@dataclass(frozen=True)
class WriterSettings:
    """Limits the writer enforces before any SQL runs."""

    # jsonb itself takes up to 255 MB, but one outbox row that large stalls every poller behind
    # it; a megabyte is a generous ceiling for an event and can be raised per deployment.
    max_payload_bytes: int = 1_048_576


@cache
def writer_settings() -> WriterSettings:
    """The settings, or WriterSettingsError naming the refused variable and its value (not
    cached: every append raises it again until the variable is fixed)."""
    value = os.environ.get(MAX_PAYLOAD_BYTES_VARIABLE)
    if value is None:
        return WriterSettings()
    digits = value.strip()
    # ASCII digits only: int() would also take "1_000" and other scripts' digits.
    if not (digits.isascii() and digits.isdigit()) or int(digits) == 0:
        raise WriterSettingsError(
            f"{MAX_PAYLOAD_BYTES_VARIABLE}={value!r} is refused:"
            " expected a whole number of bytes greater than 0"
        )
    return WriterSettings(max_payload_bytes=int(digits))
