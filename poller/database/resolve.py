"""Which database a command talks to."""

from poller.settings import PollerSettings


def resolve_database_url(settings: PollerSettings) -> str:
    """OUTBOX_DATABASE_URL when set, else the embedded server under OUTBOX_DATA_DIR."""
    if settings.database_url:
        return settings.database_url
    # Imported only when needed: the embedded server's packages take a third of a second.
    from poller.database.embedded import embedded_database_url

    return embedded_database_url(settings.data_dir)
