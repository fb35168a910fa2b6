"""The source's options: defaults, and a clear error naming each bad one (never a password)."""

from pathlib import Path

import pytest

from outbox.positions import Position
from outbox_spark.options import (
    CopyDriver,
    DatabaseLocation,
    OptionError,
    PartitionBy,
    parse_source_options,
)

REQUIRED = {"publication": "orders", "subscription": "orders-to-lake"}


def test_defaults() -> None:
    options = parse_source_options(REQUIRED)
    assert options.publication == "orders"
    assert options.subscription == "orders-to-lake"
    assert options.database == DatabaseLocation(None, "OUTBOX_DATABASE_URL")
    assert options.starting_offsets == "earliest"
    assert options.max_rows_per_batch is None
    assert options.num_partitions == 1
    assert options.partition_by is PartitionBy.RANGE
    assert options.copy_driver is CopyDriver.AUTO


def test_every_option_is_read_whatever_its_case() -> None:
    # Spark lower-cases option names before the source sees them.
    options = parse_source_options(
        {
            **REQUIRED,
            "urlenv": "LAKE_DB",
            "startingoffsets": "latest",
            "maxrowsperbatch": "500",
            "numpartitions": "4",
            "partitionby": "KEY",
            "copydriver": "psycopg",
        }
    )
    assert options.database == DatabaseLocation(None, "LAKE_DB")
    assert options.starting_offsets == "latest"
    assert options.max_rows_per_batch == 500
    assert options.num_partitions == 4
    assert options.partition_by is PartitionBy.KEY
    assert options.copy_driver is CopyDriver.PSYCOPG


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("earliest", "earliest"),
        ('{"tx": 12, "pos": 7}', Position(12, 7)),
        ("12:7", Position(12, 7)),
    ],
)
def test_starting_offsets(text: str, expected: object) -> None:
    options = parse_source_options({**REQUIRED, "startingOffsets": text})
    assert options.starting_offsets == expected


@pytest.mark.parametrize("missing", ["publication", "subscription"])
def test_a_missing_required_option_is_named(missing: str) -> None:
    options = {key: value for key, value in REQUIRED.items() if key != missing}
    with pytest.raises(OptionError, match=f"option {missing} is required"):
        parse_source_options(options)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("publication", "", "option publication must be 1 to 200 characters, got ''"),
        ("subscription", "s" * 201, "option subscription must be 1 to 200 characters"),
        ("maxRowsPerBatch", "0", "option maxRowsPerBatch must be a positive integer, got '0'"),
        ("maxRowsPerBatch", "1.5", "option maxRowsPerBatch must be a positive integer"),
        ("numPartitions", "-2", "option numPartitions must be a positive integer, got '-2'"),
        ("partitionBy", "hash", "option partitionBy must be one of range, key, got 'hash'"),
        ("copyDriver", "jdbc", "option copyDriver must be one of auto, adbc, psycopg"),
        ("startingOffsets", "newest", r"option startingOffsets must be .* got 'newest'"),
        ("startingOffsets", '{"tx": 1}', "option startingOffsets must be"),
        ("startingOffsets", "1:-2", "option startingOffsets must be"),
        ("urlEnv", " ", "option urlEnv must name an environment variable"),
    ],
)
def test_a_bad_value_is_named_with_its_option(name: str, value: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options({**REQUIRED, name: value})


def test_an_unknown_option_is_refused_so_a_typo_does_not_pass_silently() -> None:
    with pytest.raises(OptionError, match=r"unknown option.*maxrowperbatch"):
        parse_source_options({**REQUIRED, "maxRowPerBatch": "10"})


def test_url_and_url_env_exclude_each_other() -> None:
    with pytest.raises(OptionError, match="url and urlEnv exclude each other"):
        parse_source_options({**REQUIRED, "url": "postgresql://h/db", "urlEnv": "X"})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:s3cr3t-pw@db.example:5432/app",
        "host=db.example user=app password=s3cr3t-pw dbname=app",
    ],
)
def test_a_url_with_a_password_is_refused_without_printing_it(url: str) -> None:
    with pytest.raises(OptionError, match="option url contains a password") as raised:
        parse_source_options({**REQUIRED, "url": url})
    assert "s3cr3t-pw" not in str(raised.value)
    assert "s3cr3t-pw" not in repr(raised.value.__cause__)


def test_a_malformed_url_is_refused_with_its_password_masked() -> None:
    with pytest.raises(OptionError, match="not a PostgreSQL URL") as raised:
        parse_source_options({**REQUIRED, "url": "postgresql://app:s3cr3t-pw@db:notaport/x y"})
    assert "s3cr3t-pw" not in str(raised.value)
    assert raised.value.__cause__ is None


def test_a_password_less_url_is_kept_for_libpq_to_complete() -> None:
    url = "postgresql://app@db.example:5432/app"
    assert parse_source_options({**REQUIRED, "url": url}).database.conninfo() == url


def test_the_url_environment_variable_is_read_where_the_connection_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    location = parse_source_options({**REQUIRED, "urlEnv": "LAKE_DB"}).database
    monkeypatch.delenv("LAKE_DB", raising=False)
    with pytest.raises(OptionError, match=r"environment variable LAKE_DB \(option urlEnv\) is not"):
        location.conninfo()
    monkeypatch.setenv("LAKE_DB", "postgresql://app:pw@db/app")
    assert location.conninfo() == "postgresql://app:pw@db/app"


def test_url_url_env_and_url_file_exclude_each_other() -> None:
    with pytest.raises(OptionError, match="urlEnv and urlFile exclude each other"):
        parse_source_options({**REQUIRED, "urlEnv": "X", "urlFile": "/run/secrets/db"})


def test_the_url_file_is_read_where_the_connection_is_made(tmp_path: Path) -> None:
    secret = tmp_path / "database-url"
    location = parse_source_options({**REQUIRED, "urlFile": str(secret)}).database
    with pytest.raises(OptionError, match=r"urlFile: cannot read .*database-url") as raised:
        location.conninfo()
    secret.write_text("postgresql://app:s3cr3t-pw@db/app\n")
    assert location.conninfo() == "postgresql://app:s3cr3t-pw@db/app"
    assert "s3cr3t" not in str(raised.value)
    secret.write_text("  \n")
    with pytest.raises(OptionError, match="is empty"):
        location.conninfo()
