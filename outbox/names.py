"""Names and limits every part of the product shares, each written once."""

ENVIRONMENT_PREFIX = "OUTBOX_"
"""What begins every environment variable the product reads its settings from."""


def environment_variable(setting: str) -> str:
    """The variable a setting is read from: the prefix and the setting's name in capitals, as
    pydantic-settings reads it (poller/environment.py)."""
    return ENVIRONMENT_PREFIX + setting.upper()


# Where the CLI, the daemon, the Spark executors and the examples find the database.
DATABASE_URL_VARIABLE = environment_variable("database_url")

# The LISTEN/NOTIFY channel of `append(..., notify=True)`; the payload is the publication.
NOTIFY_CHANNEL = "outbox"

# Publications, subscriptions and message ids: long enough for any real name, short enough
# that a name never dominates an index entry. Matches the CHECK constraints in sql/schema.sql.
MAX_NAME_LENGTH = 200
