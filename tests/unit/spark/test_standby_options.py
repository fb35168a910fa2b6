"""A hot standby to read from (`readUrl`, `readUrlEnv`, `readUrlFile`): given as the database
is, refused as it is, and a slice's wait for its server's replay (standby_reads.py)."""

from collections.abc import Callable
from pathlib import Path

import pytest

from outbox.positions import Position
from outbox_spark.options import (
    BatchOptions,
    DatabaseLocation,
    OptionError,
    SourceOptions,
    parse_batch_options,
    parse_source_options,
)
from outbox_spark.standby_reads import ReplicaBehindError, wait_for_replay

STREAM = {"publication": "orders", "subscription": "lake", "url": "postgresql://db/app"}
BATCH = {"publication": "orders", "url": "postgresql://db/app"}


def test_without_a_read_option_everything_is_read_from_the_database() -> None:
    for options in (parse_source_options(STREAM), parse_batch_options(BATCH)):
        assert options.read_database is None
        assert options.reads == options.database


@pytest.mark.parametrize(
    ("parse", "base"), [(parse_source_options, STREAM), (parse_batch_options, BATCH)]
)
def test_reads_go_to_the_standby_given_any_of_three_ways(
    parse: Callable[[dict[str, str]], SourceOptions | BatchOptions],
    base: dict[str, str],
    tmp_path: Path,
) -> None:
    url_file = tmp_path / "standby-url"
    # Spark lower-cases option names before the source sees them.
    for given, expected in (
        ({"readurl": "postgresql://standby/app"}, "postgresql://standby/app"),
        ({"readUrlEnv": "STANDBY_DB"}, None),
        ({"readUrlFile": str(url_file)}, None),
    ):
        options = parse({**base, **given})
        assert options.reads is options.read_database
        assert options.read_database is not None
        assert options.read_database.option == "readUrl"
        assert options.read_database.url == expected
    assert options.database == DatabaseLocation("postgresql://db/app", "OUTBOX_DATABASE_URL")


def test_a_read_url_with_a_password_is_refused_naming_its_option() -> None:
    with pytest.raises(OptionError, match="option readUrl contains a password") as refused:
        parse_source_options({**STREAM, "readUrl": "postgresql://app:secret-word@standby/app"})
    assert "secret-word" not in str(refused.value)


def test_the_read_options_exclude_each_other() -> None:
    with pytest.raises(OptionError, match="options readUrl and readUrlEnv exclude each other"):
        parse_batch_options({**BATCH, "readUrl": "postgresql://standby/app", "readUrlEnv": "X"})


def test_an_unset_read_variable_is_named_with_its_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STANDBY_DB", raising=False)
    options = parse_source_options({**STREAM, "readUrlEnv": "STANDBY_DB"})
    assert options.read_database is not None
    with pytest.raises(OptionError, match=r"STANDBY_DB \(option readUrlEnv\) is not set"):
        options.read_database.conninfo()
    monkeypatch.setenv("STANDBY_DB", "postgresql://standby/app")
    assert options.read_database.conninfo() == "postgresql://standby/app"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_replayed_slice_reads_at_once() -> None:
    clock = Clock()
    wait_for_replay(lambda: True, Position(9, 9), clock=lambda: clock.now, sleep=clock.sleep)
    assert clock.slept == []


def test_a_slice_waits_for_its_server_then_reads() -> None:
    clock = Clock()
    answers = iter([False, False, False, True])
    wait_for_replay(
        lambda: next(answers), Position(9, 9), clock=lambda: clock.now, sleep=clock.sleep
    )
    assert len(clock.slept) == 2


def test_a_server_that_never_replays_the_end_fails_the_task() -> None:
    clock = Clock()
    with pytest.raises(ReplicaBehindError, match=r"not replayed up to 9:9 after 1 s"):
        wait_for_replay(
            lambda: False,
            Position(9, 9),
            patience=1.0,
            clock=lambda: clock.now,
            sleep=clock.sleep,
        )
    assert 0.9 < sum(clock.slept) < 1.1
