"""The options of `spark.readStream.format("outbox")` and `spark.read.format("outbox")`,
checked once on the driver.

Options appear in query plans, logs and the Spark UI, so none may carry a password: the
database is a password-less `url` (libpq then takes the password from PGPASSWORD or a .pgpass
file on each executor), the name of an environment variable, `urlEnv`, or the path of a file
holding the URL, `urlFile` (a mounted secret, or a file shipped with `--files`); the last two
are read on each executor at connection time. A hot standby to read messages from is given
the same three ways, `readUrl`, `readUrlEnv` or `readUrlFile`.
"""

import dataclasses
import json
import os
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Literal, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from outbox.database_url import mask_password
from outbox.names import DATABASE_URL_VARIABLE, MAX_NAME_LENGTH
from outbox.positions import START, Position
from outbox_spark.offsets import position_of

Choice = TypeVar("Choice", bound=StrEnum)


class OptionError(ValueError):
    """An option is missing, unknown or malformed; the message names it (never a password)."""


class PartitionBy(StrEnum):
    RANGE = "range"
    KEY = "key"


class CopyDriver(StrEnum):
    AUTO = "auto"
    ADBC = "adbc"
    PSYCOPG = "psycopg"


StartingOffsets = Literal["earliest", "latest"] | Position


@dataclasses.dataclass(frozen=True)
class DatabaseLocation:
    """Where to connect, resolved in the process that connects (driver or executor)."""

    url: str | None
    url_environment_variable: str
    url_file: str | None = None
    option: str = "url"
    """The options it was given by: `url` (the database), `readUrl` (a hot standby), and
    their `Env` and `File` forms."""

    def conninfo(self) -> str:
        if self.url is not None:
            return self.url
        if self.url_file is not None:
            return _read_url_file(self.url_file, f"{self.option}File")
        value = os.environ.get(self.url_environment_variable)
        if not value:
            raise OptionError(
                f"environment variable {self.url_environment_variable} (option"
                f" {self.option}Env) is not set in this process (pid {os.getpid()}); set it on"
                f" the driver and every executor, or pass a password-less `{self.option}`"
                " option"
            )
        return value


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    publication: str
    subscription: str
    database: DatabaseLocation
    starting_offsets: StartingOffsets = "earliest"
    max_rows_per_batch: int | None = None
    num_partitions: int = 1
    partition_by: PartitionBy = PartitionBy.RANGE
    copy_driver: CopyDriver = CopyDriver.AUTO
    read_database: DatabaseLocation | None = None
    """A hot standby of the database: batch ends, split points and slices are read there;
    the subscription row (progress) is written on `database`."""
    archive: str | None = None
    """The publication's archive, as the executors reach it: the query reads what it holds
    from there, and the table after it (outbox_spark/archive_reads.py)."""

    @property
    def reads(self) -> DatabaseLocation:
        return self.database if self.read_database is None else self.read_database


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """A batch read of `(start, end]`; `end` None is the last safe row when it is planned."""

    publication: str
    database: DatabaseLocation
    start: Position
    end: Position | None = None
    num_partitions: int = 1
    partition_by: PartitionBy = PartitionBy.RANGE
    copy_driver: CopyDriver = CopyDriver.AUTO
    read_database: DatabaseLocation | None = None
    """A hot standby of the database: everything is read there (`database` is asked only
    whether it is one)."""
    archive: str | None = None
    """The publication's archive, as the executors reach it: the read takes what it holds
    from there, and the table after it (outbox_spark/archive_reads.py)."""

    @property
    def reads(self) -> DatabaseLocation:
        return self.database if self.read_database is None else self.read_database


_DATABASE = ("url", "urlEnv", "urlFile")
_READ_DATABASE = ("readUrl", "readUrlEnv", "readUrlFile")
_COMMON = (
    "publication",
    *_DATABASE,
    *_READ_DATABASE,
    "numPartitions",
    "partitionBy",
    "copyDriver",
    "archive",
)
_STREAM_ONLY = ("subscription", "startingOffsets", "maxRowsPerBatch")
_BATCH_ONLY = ("startingOffsets", "endingOffsets")


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    values = _known_values(options, (*_COMMON, *_STREAM_ONLY), "a streaming query")
    return SourceOptions(
        publication=_identifier(values, "publication"),
        subscription=_identifier(values, "subscription"),
        database=_database(values),
        starting_offsets=_starting_offsets(values.get("startingoffsets", "earliest")),
        max_rows_per_batch=_positive_integer(values, "maxRowsPerBatch"),
        num_partitions=_positive_integer(values, "numPartitions") or 1,
        partition_by=_choice(values, "partitionBy", PartitionBy, PartitionBy.RANGE),
        copy_driver=_choice(values, "copyDriver", CopyDriver, CopyDriver.AUTO),
        read_database=_read_database(values),
        archive=_archive(values),
    )


def parse_batch_options(options: Mapping[str, str]) -> BatchOptions:
    """A batch read keeps no progress, so it takes no subscription, and ends where it says."""
    values = _known_values(options, (*_COMMON, *_BATCH_ONLY), "a batch read")
    return BatchOptions(
        publication=_identifier(values, "publication"),
        database=_database(values),
        start=_offset_option(values, "startingOffsets", "earliest") or START,
        end=_offset_option(values, "endingOffsets", "latest"),
        num_partitions=_positive_integer(values, "numPartitions") or 1,
        partition_by=_choice(values, "partitionBy", PartitionBy, PartitionBy.RANGE),
        copy_driver=_choice(values, "copyDriver", CopyDriver, CopyDriver.AUTO),
        read_database=_read_database(values),
        archive=_archive(values),
    )


def check_options(options: Mapping[str, str]) -> None:
    """At load(), before Spark says which read it is: the options must make one of the two.

    A failing set is reported for the read it looks like: a stream names its subscription.
    """
    try:
        parse_source_options(options)
    except OptionError as stream_error:
        try:
            parse_batch_options(options)
        except OptionError as batch_error:
            named_subscription = any(key.lower() == "subscription" for key in options)
            raise (stream_error if named_subscription else batch_error) from None


def _known_values(options: Mapping[str, str], known: tuple[str, ...], mode: str) -> dict[str, str]:
    """The options by lower-cased name (as Spark hands them over), any unknown one refused
    in its documented spelling."""
    spelling = {name.lower(): name for name in known}
    values = {key.lower(): value for key, value in options.items()}
    unknown = sorted(set(values) - set(spelling))
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)} for {mode}; the outbox source takes"
            f" {', '.join(sorted(known))} there"
        )
    return values


def refuse_password(url: str, option: str) -> str:
    """Return `url` if it carries no password; the error never repeats the url unmasked."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # Not chained: libpq's parse error may quote the part of the url holding the password.
        raise OptionError(
            f"option {option} is not a PostgreSQL URL or conninfo string: {mask_password(url)}"
        ) from None
    if parts.get("password"):
        raise OptionError(
            f"option {option} contains a password; options are visible in plans and the Spark"
            " UI. Leave it out and let libpq find it (PGPASSWORD or a .pgpass file on every"
            " executor), or put the whole URL in an environment variable named by urlEnv"
            f" (default {DATABASE_URL_VARIABLE})"
        )
    return url


def _identifier(values: Mapping[str, str], name: str) -> str:
    value = values.get(name.lower())
    if value is None:
        raise OptionError(f"option {name} is required")
    if not value or len(value) > MAX_NAME_LENGTH:
        raise OptionError(f"option {name} must be 1 to {MAX_NAME_LENGTH} characters, got {value!r}")
    return value


def _database(values: Mapping[str, str]) -> DatabaseLocation:
    """`url`, `urlEnv` or `urlFile`; none: the environment variable OUTBOX_DATABASE_URL."""
    return _location(values, _DATABASE, DATABASE_URL_VARIABLE)


def _read_database(values: Mapping[str, str]) -> DatabaseLocation | None:
    """`readUrl`, `readUrlEnv` or `readUrlFile`; none: no hot standby, reads go to `url`."""
    if not any(name.lower() in values for name in _READ_DATABASE):
        return None
    return _location(values, _READ_DATABASE, "")


def _location(
    values: Mapping[str, str], names: tuple[str, str, str], default_variable: str
) -> DatabaseLocation:
    url_option, variable_option, file_option = names
    url = values.get(url_option.lower())
    environment_variable = values.get(variable_option.lower())
    url_file = values.get(file_option.lower())
    given = [name for name in names if name.lower() in values]
    if len(given) > 1:
        raise OptionError(f"options {' and '.join(given)} exclude each other; give one")
    if environment_variable is not None and not environment_variable.strip():
        raise OptionError(f"option {variable_option} must name an environment variable, got ''")
    if url_file is not None and not url_file.strip():
        raise OptionError(f"option {file_option} must be the path of a file, got ''")
    return DatabaseLocation(
        url=None if url is None else refuse_password(url, url_option),
        url_environment_variable=environment_variable or default_variable,
        url_file=url_file,
        option=url_option,
    )


def _read_url_file(name: str, option: str) -> str:
    """The URL in file `name`: a path, or the name of a file shipped with spark-submit --files.

    Read where the connection is made, so the URL (and its password) never travels in an
    option; the error names the path, never the content.
    """
    path = Path(name)
    if not path.is_absolute() and not path.exists():
        # Options are read in Spark's Python workers (planner and tasks), where SparkFiles
        # knows the directory spark-submit --files shipped the file to.
        from pyspark import SparkFiles

        path = Path(SparkFiles.get(name))
    try:
        url = path.read_text().strip()
    except OSError as error:
        raise OptionError(
            f"option {option}: cannot read {name} in this process (pid {os.getpid()}):"
            f" {error.strerror}; the file must exist on the driver and every executor"
        ) from None
    if not url:
        raise OptionError(f"option {option}: {name} is empty")
    return url


def _starting_offsets(text: str) -> StartingOffsets:
    if text == "earliest":
        return "earliest"
    if text == "latest":
        return "latest"
    return _position(text, "startingOffsets", ("earliest", "latest"))


def _offset_option(values: Mapping[str, str], name: str, word: str) -> Position | None:
    """The position an option names, or None for its one word (its default)."""
    text = values.get(name.lower(), word)
    return None if text == word else _position(text, name, (word,))


def _position(text: str, name: str, words: tuple[str, ...]) -> Position:
    try:
        if text.lstrip().startswith("{"):
            return position_of(json.loads(text))
        return Position.parse(text)
    except ValueError as error:  # OffsetError and malformed JSON included
        raise OptionError(
            f"option {name} must be {', '.join(words)}, an offset"
            f' {{"tx": TX, "pos": POS}} or TX:POS, got {text!r} ({error})'
        ) from None


def _archive(values: Mapping[str, str]) -> str | None:
    """The archive's URI; refused with partitionBy key, which the archive cannot serve: a
    key's bucket is PostgreSQL's hash of it, which the archive's files do not carry."""
    uri = values.get("archive")
    if uri is None:
        return None
    if not uri.strip():
        raise OptionError("option archive must be the archive's URI, got ''")
    if values.get("partitionby", "").lower() == PartitionBy.KEY:
        raise OptionError(
            "option archive reads with partitionBy range only: a key's bucket is PostgreSQL's"
            " hash of the key, which the archive does not hold"
        )
    return uri


def _positive_integer(values: Mapping[str, str], name: str) -> int | None:
    text = values.get(name.lower())
    if text is None:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise OptionError(f"option {name} must be a positive integer, got {text!r}")
    return int(text)


def _choice(values: Mapping[str, str], name: str, kind: type[Choice], default: Choice) -> Choice:
    text = values.get(name.lower())
    if text is None:
        return default
    try:
        return kind(text.lower())
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise OptionError(f"option {name} must be one of {allowed}, got {text!r}") from None
