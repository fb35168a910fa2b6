"""A migration that loses the roles' race to another database of the cluster runs again
(outbox.schema_migrations._lost_role_race says why); any other failure does not.

The race itself needs several databases migrating at once and shows about one run in twenty
(tests/integration/test_roles.py); here the first attempts fail as the race makes them fail,
and the retry is what is under test."""

from collections.abc import Callable

import psycopg
import pytest
import sqlalchemy.exc
from alembic.config import Config

from outbox import schema_migrations as migrations
from tests.support.databases import DatabaseFactory

RACE = psycopg.errors.UndefinedObject('role "outbox_writer" does not exist')


def failing(monkeypatch: pytest.MonkeyPatch, times: int, error: BaseException) -> list[str]:
    """The first `times` migrations raise `error` as SQLAlchemy wraps it; returns a log."""
    attempts: list[str] = []
    real = migrations._to_revision

    def to_revision(step: Callable[[Config, str], None], config: Config, revision: str) -> None:
        attempts.append(revision)
        if len(attempts) <= times:
            raise sqlalchemy.exc.ProgrammingError("GRANT ...", {}, error)
        real(step, config, revision)

    monkeypatch.setattr(migrations, "_to_revision", to_revision)
    return attempts


@pytest.fixture
def unmigrated(database_factory: DatabaseFactory) -> object:
    url = database_factory.create(migrated=False)
    yield url
    database_factory.drop(url)


def test_a_lost_race_is_migrated_again(unmigrated: str, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = failing(monkeypatch, 2, RACE)
    migrations.upgrade(unmigrated)
    assert len(attempts) == 3
    assert migrations.current_revision(unmigrated) is not None


def test_a_race_lost_three_times_is_raised(
    unmigrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = failing(monkeypatch, 3, RACE)
    with pytest.raises(sqlalchemy.exc.ProgrammingError, match="outbox_writer"):
        migrations.upgrade(unmigrated)
    assert len(attempts) == 3
    assert migrations.current_revision(unmigrated) is None  # each attempt rolled back whole


def test_another_failure_is_raised_at_once(
    unmigrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts = failing(monkeypatch, 1, psycopg.errors.UndefinedObject('type "x" does not exist'))
    with pytest.raises(sqlalchemy.exc.ProgrammingError):
        migrations.upgrade(unmigrated)
    assert len(attempts) == 1
