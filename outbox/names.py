"""Names and limits every part of the product shares, each written once."""

# Where the CLI, the daemon, the Spark executors and the examples find the database.
DATABASE_URL_VARIABLE = "OUTBOX_DATABASE_URL"

# The LISTEN/NOTIFY channel of `append(..., notify=True)`; the payload is the publication.
NOTIFY_CHANNEL = "outbox"

# Publications, subscriptions and message ids: long enough for any real name, short enough
# that a name never dominates an index entry. Matches the CHECK constraints in sql/schema.sql.
MAX_NAME_LENGTH = 200
