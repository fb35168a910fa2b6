"""Test doubles that Spark's Python workers import by name (so they live in a module).

FailingOutboxSource is the outbox source with a fault: the first read() of a slice starting
at or after the `failAfter` position fails, once. Every slice read is logged, so a test can
see what a replay read.
HoldingOutboxSource is the outbox source that stalls one read mid-stream: the first read() of a
slice starting at or after `holdAfter` yields its first Arrow batch, writes its process id to
`holdDirectory`/holding, and sleeps, so a test can kill that process's executor while a
micro-batch reads.
RecordingWriter writes each row a sink task receives, in arrival order, to a file of its own.
"""

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from outbox.positions import Position
from outbox_spark.arrow_schema import SPARK_SCHEMA
from outbox_spark.options import SourceOptions, parse_source_options
from outbox_spark.source import OutboxDataSource, OutboxStreamReader

TEST_OPTIONS = ("faultdirectory", "failafter", "holddirectory", "holdafter")
HOLD_SECONDS = 300.0


def claim_once(path: Path, content: str = "") -> bool:
    """Create `path` with `content` unless it exists: O_EXCL, so one task in one process wins."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    try:
        os.write(descriptor, content.encode())
    finally:
        os.close(descriptor)
    return True


class FailingOutboxSource(OutboxDataSource):
    @classmethod
    def name(cls) -> str:
        return "outbox_failing_once"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> "FailingReader":  # noqa: N802, ARG002
        options = {key: value for key, value in self.options.items() if key not in TEST_OPTIONS}
        return FailingReader(
            parse_source_options(options),
            Path(self.options["faultDirectory"]),
            Position.parse(self.options["failAfter"]),
        )


class FailingReader(OutboxStreamReader):
    def __init__(self, options: SourceOptions, directory: Path, fail_after: Position) -> None:
        super().__init__(options)
        self.directory = directory
        self.fail_after = fail_after

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = partition.value
        with (self.directory / "reads.log").open("a") as log:
            log.write(f"{part.after} {part.until}\n")
        if part.after >= self.fail_after and claim_once(self.directory / "failed"):
            raise RuntimeError("injected failure after the batch's offsets were logged")
        return super().read(partition)


class HoldingOutboxSource(OutboxDataSource):
    @classmethod
    def name(cls) -> str:
        return "outbox_holding_once"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> "HoldingReader":  # noqa: N802, ARG002
        options = {key: value for key, value in self.options.items() if key not in TEST_OPTIONS}
        return HoldingReader(
            parse_source_options(options),
            Path(self.options["holdDirectory"]),
            Position.parse(self.options["holdAfter"]),
        )


class HoldingReader(OutboxStreamReader):
    def __init__(self, options: SourceOptions, directory: Path, hold_after: Position) -> None:
        super().__init__(options)
        self.directory = directory
        self.hold_after = hold_after

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = super().read(partition)
        if partition.value.after < self.hold_after:
            return batches
        return self._held_after_the_first(batches)

    def _held_after_the_first(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        first = True
        for batch in batches:
            yield batch
            if first and claim_once(self.directory / "holding", str(os.getpid())):
                time.sleep(HOLD_SECONDS)  # until the test kills this process's executor
            first = False


class RecordingWriter:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.file = (self.directory / f"{epoch_id:05d}-{partition_id:03d}.jsonl").open("a")
        return True

    def process(self, row: Row) -> None:
        record: list[Any] = [row.partition_key, row.transaction_id, row.position]
        self.file.write(json.dumps(record) + "\n")

    def close(self, error: BaseException | None) -> None:  # noqa: ARG002
        self.file.close()
