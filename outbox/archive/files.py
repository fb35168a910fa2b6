"""The archive's Parquet files: written by the Spark job's tasks, read by every reader, through
pyarrow's filesystems (the `archive` extra; the `spark` extra has pyarrow too).

One filesystem layer writes and reads, so what the job can write every reader can read with
the same settings: a local path or file:// URI, s3:// (s3a://, Hadoop's name for it, is read as
s3://; credentials from the AWS environment, as pyarrow.fs.S3FileSystem takes them), gs://,
and hdfs:// (pyarrow's HadoopFileSystem: libhdfs, HADOOP_HOME and the Hadoop CLASSPATH).

A file is encoded in memory and written in one piece, its SHA-256 taken on the bytes written,
so the digest the catalog records is the file's without reading it back. A reader checks
every file against the catalog before using a row of it: its size, its digest, its format
version (in the file's key-value metadata) and its row count, and Parquet's page checksums as
it decodes. Each failure names the file.
"""

import hashlib
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from outbox.archive.errors import ArchiveFileError
from outbox.archive.layout import (
    FORMAT_VERSION,
    PUBLICATION_KEY,
    VERSION_KEY,
    ArchivedFile,
    check_version,
    publication_directory,
)
from outbox.positions import Position

ARCHIVE_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("transaction_id", pa.int64(), nullable=False),
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("message_type", pa.string(), nullable=False),
        pa.field("partition_key", pa.string(), nullable=True),
        pa.field("data", pa.string(), nullable=False),
        pa.field("headers", pa.string(), nullable=False),
        pa.field("appended_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

DELIVERY_ORDER = [("transaction_id", "ascending"), ("position", "ascending")]


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for an archive's URI, and the archive's root in it."""
    if uri.startswith("s3a://"):
        uri = "s3://" + uri.removeprefix("s3a://")
    try:
        found: tuple[pafs.FileSystem, str] = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, OSError) as error:
        raise ArchiveFileError(uri, f"is not a location pyarrow can reach: {error}") from None
    return found


def located(uri: str, path: str) -> str:
    """A file's name for people: the archive's URI and the file's path in it."""
    return f"{uri.rstrip('/')}/{path}"


# Writing ------------------------------------------------------------------------------------


def encode(table: pa.Table, publication: str) -> pa.Buffer:
    """`table` (ARCHIVE_SCHEMA, sorted in delivery order) as a Parquet file in memory."""
    metadata = {VERSION_KEY: str(FORMAT_VERSION), PUBLICATION_KEY: publication}
    sink = pa.BufferOutputStream()
    pq.write_table(
        table.replace_schema_metadata(metadata),
        sink,
        compression="zstd",
        write_page_checksum=True,
        # Row-group statistics on position and transaction_id let a reader looking for one
        # message skip the rest of a file.
        write_statistics=True,
    )
    return sink.getvalue()


def store(uri: str, path: str, data: pa.Buffer) -> str:
    """Write `data` at `path` under the archive; returns its SHA-256. A local file is
    flushed to disk (with its directory) before this returns: the catalog records it as
    complete next, and a power cut must not leave the record without the file."""
    fs, root = filesystem(uri)
    full = f"{root.rstrip('/')}/{path}"
    directory = full.rsplit("/", 1)[0]
    try:
        fs.create_dir(directory, recursive=True)
        with fs.open_output_stream(full) as stream:
            stream.write(data)
        if isinstance(fs, pafs.LocalFileSystem):
            _flush_to_disk(full)
            _flush_to_disk(directory)
    except OSError as error:
        raise ArchiveFileError(located(uri, path), f"cannot be written: {error}") from error
    return hashlib.sha256(data).hexdigest()


def _flush_to_disk(path: str) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def remove(uri: str, paths: list[str]) -> None:
    """Delete files of the archive (best effort: one already gone is not an error)."""
    fs, root = filesystem(uri)
    for path in paths:
        try:
            fs.delete_file(f"{root.rstrip('/')}/{path}")
        except FileNotFoundError:
            continue


def part_files(uri: str, publication: str) -> list[str]:
    """Every part file under the publication's directory, as paths relative to the archive."""
    fs, root = filesystem(uri)
    base = root.rstrip("/")
    selector = pafs.FileSelector(
        f"{base}/{publication_directory(publication)}", allow_not_found=True, recursive=True
    )
    return sorted(
        info.path.removeprefix(base + "/")
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File and info.base_name.startswith("part-")
    )


def remove_publication(uri: str, publication: str) -> None:
    """Delete the publication's directory of the archive, whole."""
    fs, root = filesystem(uri)
    directory = f"{root.rstrip('/')}/{publication_directory(publication)}"
    try:
        fs.delete_dir(directory)
    except FileNotFoundError:
        return


# Reading ------------------------------------------------------------------------------------


def problem_with(uri: str, file: ArchivedFile) -> str | None:
    """What is wrong with a listed file that a look at it shows (missing, another size), or
    None. Cheap (no read): retention asks it of every file whose messages it may drop."""
    fs, root = filesystem(uri)
    try:
        info = fs.get_file_info(f"{root.rstrip('/')}/{file.path}")
    except OSError as error:
        return f"archive file {located(uri, file.path)} cannot be looked at: {error}"
    if info.type == pafs.FileType.NotFound:
        return f"archive file {located(uri, file.path)} is missing"
    if info.size != file.bytes:
        return (
            f"archive file {located(uri, file.path)} is {info.size} bytes, the archive"
            f" recorded {file.bytes}"
        )
    return None


def read_file(uri: str, file: ArchivedFile) -> pa.Table:
    """A listed file's rows, once the file is checked against what the catalog recorded."""
    name = located(uri, file.path)
    fs, root = filesystem(uri)
    try:
        with fs.open_input_file(f"{root.rstrip('/')}/{file.path}") as stream:
            data = stream.read_buffer()
    except FileNotFoundError:
        raise ArchiveFileError(name, "is missing") from None
    except OSError as error:
        raise ArchiveFileError(name, f"cannot be read: {error}") from None
    if data.size != file.bytes:
        raise ArchiveFileError(
            name, f"is {data.size} bytes, the archive recorded {file.bytes}: it was changed"
        )
    if hashlib.sha256(data).hexdigest() != file.sha256:
        raise ArchiveFileError(name, "does not match the SHA-256 the archive recorded: damaged")
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        metadata = parquet.schema_arrow.metadata or {}
        version = int(metadata.get(VERSION_KEY.encode(), b"0"))
        check_version(version, f"archive file {name}")
        table = parquet.read()
    except (pa.ArrowException, OSError, ValueError) as error:
        raise ArchiveFileError(name, f"is not a readable archive file: {error}") from None
    if version < 1 or table.num_rows != file.rows:
        raise ArchiveFileError(
            name,
            f"holds {table.num_rows} rows of version {version}, the archive recorded"
            f" {file.rows} of version {FORMAT_VERSION}",
        )
    return table.select(list(ARCHIVE_SCHEMA.names)).cast(ARCHIVE_SCHEMA)


def read_slice(
    uri: str, files: tuple[ArchivedFile, ...], after: Position, until: Position | None = None
) -> pa.Table:
    """The rows of one slice's files in (after, until], in delivery order."""
    tables = [read_file(uri, file) for file in files]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables).sort_by(DELIVERY_ORDER)
    return between(table, after, until)


def between(table: pa.Table, after: Position, until: Position | None) -> pa.Table:
    """The rows of a table sorted in delivery order that lie in (after, until]."""
    transaction = table.column("transaction_id")
    position = table.column("position")
    keep = _after(transaction, position, after)
    if until is not None:
        keep = pc.and_(keep, pc.invert(_after(transaction, position, until)))
    return table.filter(keep)


def _after(transaction: Any, position: Any, at: Position) -> Any:
    """(transaction_id, position) > at, as PostgreSQL compares the row value."""
    return pc.or_(
        pc.greater(transaction, at.transaction_id),
        pc.and_(pc.equal(transaction, at.transaction_id), pc.greater(position, at.position)),
    )


def find(uri: str, files: list[ArchivedFile], column: str, value: object) -> pa.Table:
    """The rows of the first of `files` holding `column == value` (none: an empty table).
    Each file's footer is read first, and only a file whose row-group statistics allow the
    value is read whole (and checked): a message looked up by position reads one file."""
    fs, root = filesystem(uri)
    for file in files:
        if not _may_hold(fs, f"{root.rstrip('/')}/{file.path}", column, value):
            continue
        table = read_file(uri, file)
        rows = table.filter(pc.equal(table.column(column), pa.scalar(value)))
        if rows.num_rows:
            return rows
    return ARCHIVE_SCHEMA.empty_table()


def _may_hold(fs: pafs.FileSystem, path: str, column: str, value: Any) -> bool:
    try:
        with fs.open_input_file(path) as stream:
            metadata = pq.read_metadata(stream)
    except (OSError, pa.ArrowException):
        return True  # unreadable here: the checked read says what is wrong, naming the file
    index = metadata.schema.to_arrow_schema().get_field_index(column)
    for group in range(metadata.num_row_groups):
        statistics = metadata.row_group(group).column(index).statistics
        if statistics is None or not statistics.has_min_max:
            return True
        if statistics.min <= value <= statistics.max:
            return True
    return False
