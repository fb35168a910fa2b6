"""Settings read from OUTBOX_* environment variables: every part but the writer reads its own
with a pydantic-settings class on EnvironmentSettings (the daemon's extra installs
pydantic-settings). The writer, whose install is psycopg alone, reads its one variable with
the standard library (outbox/settings.py); both name a setting's variable the same way
(outbox.names.environment_variable)."""

from pydantic_settings import BaseSettings, SettingsConfigDict

from outbox.names import ENVIRONMENT_PREFIX


class EnvironmentSettings(BaseSettings):
    """A field `name` is read from OUTBOX_NAME; variables of other parts are ignored."""

    model_config = SettingsConfigDict(env_prefix=ENVIRONMENT_PREFIX, extra="ignore")
