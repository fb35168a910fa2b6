"""Spark jobs over the outbox, run by `outbox spark run JOB` or `spark-submit FILE`.

A job is a module with `argument_parser()` and `start(spark, arguments) -> StreamingQuery`;
it takes the source's connection arguments from `add_source_arguments`, so the CLI can tell
whether the database comes from `--url` or from OUTBOX_DATABASE_URL.
"""

import argparse
import importlib
from types import ModuleType

# Job name -> module; imported only when run, so listing jobs needs no Spark.
JOBS = {"message-type-counts": "outbox_spark.jobs.message_type_counts"}


def load_job(name: str) -> ModuleType:
    if name not in JOBS:
        raise KeyError(f"no job {name!r}; jobs: {', '.join(sorted(JOBS))}")
    return importlib.import_module(JOBS[name])


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("outbox source")
    source.add_argument("--publication", required=True)
    source.add_argument(
        "--subscription",
        required=True,
        help="the subscription row the query's progress is kept in (created if missing; it"
        " holds retention back, so delete it with `outbox subscription delete` when the job is"
        " retired; `outbox status` lists it as a Spark query)",
    )
    location = source.add_mutually_exclusive_group()
    location.add_argument(
        "--url",
        help="a password-less database URL (libpq finds the password in PGPASSWORD or"
        " .pgpass on each executor); default: OUTBOX_DATABASE_URL in each executor's environment",
    )
    location.add_argument(
        "--url-file",
        help="a file holding the database URL, read on the driver and each executor: a"
        " mounted secret's path, or the name of a file shipped with spark-submit --files",
    )
    source.add_argument("--starting-offsets", default="earliest")
    source.add_argument("--max-rows-per-batch", type=int)
    source.add_argument("--num-partitions", type=int, default=1)
    source.add_argument("--partition-by", choices=("range", "key"), default="range")
    source.add_argument(
        "--available-now",
        action="store_true",
        help="process what is committed now, then stop (default: run until stopped)",
    )
    source.add_argument("--trigger-interval", default="10 seconds")


def source_options(arguments: argparse.Namespace) -> dict[str, str]:
    """The options of spark.readStream.format("outbox") from add_source_arguments' values."""
    options = {
        "publication": arguments.publication,
        "subscription": arguments.subscription,
        "startingOffsets": arguments.starting_offsets,
        "numPartitions": str(arguments.num_partitions),
        "partitionBy": arguments.partition_by,
    }
    if arguments.url is not None:
        options["url"] = arguments.url
    if arguments.url_file is not None:
        options["urlFile"] = arguments.url_file
    if arguments.max_rows_per_batch is not None:
        options["maxRowsPerBatch"] = str(arguments.max_rows_per_batch)
    return options
