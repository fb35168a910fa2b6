"""Reading one slice of a batch into Arrow record batches, on an executor.

COPY is the fastest way out of PostgreSQL, and COPY takes no bind parameters, so the slice's
bounds are rendered into the statement as literals (psycopg.sql.Literal, never formatting).
The ADBC driver runs it as binary COPY and builds Arrow in C++; when it is not installed (or
`copyDriver=psycopg`), psycopg streams COPY as CSV and pyarrow parses it in C++, so no row
ever becomes a Python object either way.
"""

import importlib.util
from collections.abc import Generator
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv
from psycopg import sql

from outbox.positions import Position
from outbox.read_servers import ReadProof
from outbox_spark.archive_reads import missing_from_archive
from outbox_spark.csv_chunks import whole_row_pieces
from outbox_spark.options import CopyDriver
from outbox_spark.partitions import Slice
from outbox_spark.queries import spark_queries
from outbox_spark.retired_ranges import RetiredRangeError, mark_statement, refuse_retired
from outbox_spark.standby_reads import replayed_past, replayed_statement, wait_for_replay
from outbox_spark.wire_batches import WIRE_SCHEMA, declared_batch
from outbox_spark.worker_connections import adbc_connection

APPLICATION_NAME = "outbox-spark-source"


def slice_statement(publication: str, part: Slice) -> sql.Composed:
    """The SELECT of one slice, with its bounds as literals."""
    values: dict[str, Any] = {
        "publication": publication,
        **part.after.query_parameters("after_"),
        **part.until.query_parameters("until_"),
    }
    if part.by_key:
        values |= {"bucket": part.bucket, "buckets": part.buckets}
    name = "spark_read_key_bucket" if part.by_key else "spark_read_slice"
    return sql.SQL(spark_queries()[name]).format(
        **{key: sql.Literal(value) for key, value in values.items()}
    )


def _chosen_driver(requested: CopyDriver) -> CopyDriver:
    if requested is not CopyDriver.AUTO:
        return requested
    if importlib.util.find_spec("adbc_driver_postgresql") is not None:
        return CopyDriver.ADBC
    return CopyDriver.PSYCOPG


def read_slice(
    conninfo: str,
    publication: str,
    part: Slice,
    driver: CopyDriver,
    *,
    proof: ReadProof | None,
    check_retired: bool = False,
    archive: str | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """Yield the slice's rows in the declared schema (in delivery order for a key bucket).

    A generator, because Spark may close it early, and closing it must end the COPY. On a read
    server (`proof`) it raises ReadServerRefusedError, before reading, when the server is no
    standby of the primary any more (outbox_spark/standby_reads.py). With `check_retired` (a
    batch read, which holds no subscription row back), the slice ends by checking whether
    retention dropped rows of it (outbox_spark/retired_ranges.py): then it raises
    RetiredRangeError, or with the publication's `archive` takes them from there
    (outbox_spark/archive_reads.py).
    """
    statement = slice_statement(publication, part)
    if _chosen_driver(driver) is CopyDriver.ADBC:
        rows = _read_with_adbc(conninfo, statement, publication, part.until, proof, check_retired)
    else:
        rows = _read_with_psycopg(
            conninfo, statement, publication, part.until, proof, check_retired
        )
    if not check_retired:
        return _without_mark(rows)
    return _checked(rows, conninfo, publication, part, archive)


_Rows = Generator[pa.RecordBatch, None, tuple[Any, ...] | None]
"""A slice's batches, then (the generator's value) the retired-up-to mark read after them."""


def _without_mark(rows: _Rows) -> Generator[pa.RecordBatch, None, None]:
    yield from rows


def _checked(
    rows: _Rows, conninfo: str, publication: str, part: Slice, archive: str | None
) -> Generator[pa.RecordBatch, None, None]:
    read: list[pa.Array] = []
    if archive is None:
        mark_row = yield from rows
    else:
        mark_row = yield from _positions_kept(rows, read)
    try:
        refuse_retired(publication, part.after, mark_row)
    except RetiredRangeError as error:
        if archive is None:
            raise
        # Dropped since the plan: the archive holds them (its mark is past the retired one).
        until = min(error.mark, part.until)
        yield from missing_from_archive(
            conninfo, APPLICATION_NAME, publication, archive, part.after, until, read
        )


def _positions_kept(rows: _Rows, read: list[pa.Array]) -> _Rows:
    """`rows`, keeping each batch's positions in `read` (8 bytes a row)."""
    try:
        while True:
            try:
                batch = next(rows)
            except StopIteration as end:
                mark_row: tuple[Any, ...] | None = end.value
                return mark_row
            read.append(batch.column("position"))
            yield batch
    finally:
        rows.close()


def _read_with_adbc(
    conninfo: str,
    statement: sql.Composed,
    publication: str,
    until: Position,
    proof: ReadProof | None,
    read_mark: bool,
) -> _Rows:
    # Without a connection, as_string writes backslashes in E'...' strings, valid whatever
    # the server's standard_conforming_strings.
    text = statement.as_string(None)
    with (
        adbc_connection(conninfo, APPLICATION_NAME) as connection,
        connection.cursor() as cursor,
    ):
        if proof is not None:  # a read server's slice (see standby_reads.py)
            statement_text = replayed_statement(until).as_string(None)

            def replayed() -> bool:
                cursor.execute(statement_text)
                return replayed_past(cursor.fetchone(), proof)

            wait_for_replay(replayed, until)
        # Without parameters the driver runs COPY (...) TO STDOUT (FORMAT binary).
        cursor.execute(text)
        finished = False
        try:
            for batch in cursor.fetch_record_batch():
                yield declared_batch(batch, publication)
            finished = True
        finally:
            if not finished:
                # Spark stopped reading (a LIMIT, a cancelled task). Closing alone ends the
                # backend only when it next sends, which a key bucket's scan, filtering out
                # most rows, may not do for long: cancel so the server stops at once.
                cursor.adbc_cancel()
        if read_mark:
            cursor.execute(mark_statement(publication).as_string(None))
            mark_row: tuple[Any, ...] | None = cursor.fetchone()
            return mark_row
    return None


def _read_with_psycopg(
    conninfo: str,
    statement: sql.Composed,
    publication: str,
    until: Position,
    proof: ReadProof | None,
    read_mark: bool,
) -> _Rows:
    with psycopg.connect(conninfo, autocommit=True, application_name=APPLICATION_NAME) as conn:
        if proof is not None:  # a read server's slice (see standby_reads.py)
            replay_check = replayed_statement(until)

            def replayed() -> bool:
                return replayed_past(conn.execute(replay_check).fetchone(), proof)

            wait_for_replay(replayed, until)
        # CSV renders timestamptz in the session's zone and style; Arrow reads ISO with +00.
        conn.execute("SET TimeZone TO 'UTC'")
        conn.execute("SET DateStyle TO 'ISO'")
        copy_statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(statement)
        # Leaving the block early (GeneratorExit) makes psycopg cancel the COPY on the server.
        with conn.cursor() as cursor, cursor.copy(copy_statement) as copy:
            for piece in whole_row_pieces(copy, _CSV_PIECE_BYTES):
                table = pa_csv.read_csv(
                    pa.BufferReader(piece),
                    read_options=_CSV_READ_OPTIONS,
                    parse_options=_CSV_PARSE_OPTIONS,
                    convert_options=_CSV_CONVERT_OPTIONS,
                )
                for batch in table.to_batches():
                    yield declared_batch(batch, publication)
        if read_mark:
            return conn.execute(mark_statement(publication)).fetchone()
    return None


_CSV_PIECE_BYTES = 8 << 20
_CSV_READ_OPTIONS = pa_csv.ReadOptions(column_names=WIRE_SCHEMA.names)
# Keys and ids are free text and may hold line breaks inside quotes.
_CSV_PARSE_OPTIONS = pa_csv.ParseOptions(newlines_in_values=True)
_CSV_CONVERT_OPTIONS = pa_csv.ConvertOptions(
    # xid8 and jsonb print as decimal and JSON text: parsed straight into the declared types.
    column_types=WIRE_SCHEMA,
    # COPY's CSV writes NULL as an empty unquoted field and '' as "", so only the unquoted
    # empty field is a null.
    null_values=[""],
    strings_can_be_null=True,
    quoted_strings_can_be_null=False,
)
