"""`outbox console`'s defaults, each written once. This module imports nothing, so the
command line's options (outbox_cli/console_command.py) read them here and `outbox --help`
works without the console extra."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8400
DEFAULT_SAMPLE_INTERVAL = 5.0
"""Seconds between two readings of the overview (and points of the charts)."""
HISTORY_SECONDS = 3600.0
"""How far back the charts reach."""
