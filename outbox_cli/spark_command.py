"""`outbox spark ...`: Spark jobs over the outbox (needs the `spark` extra).

pipeline (hence pyspark and a JVM) is imported inside the commands, so `outbox --help` and
every other command start without them.
"""

import logging
import math
import os
import signal
import threading

import click

from outbox.archive.layout import ArchiveDefaults
from outbox.messages import check_name
from outbox.names import DATABASE_URL_VARIABLE
from outbox_cli.context import CommandContext
from outbox_cli.errors import CommandUsageError
from outbox_cli.printing import cell, console


@click.group()
def spark() -> None:
    """Spark jobs that read a publication with the snapshot-safe rule."""


@spark.command("jobs")
def jobs() -> None:
    """List the jobs `outbox spark run` knows."""
    from outbox_spark.jobs import JOBS

    for name, module in sorted(JOBS.items()):
        click.echo(f"{name}\t{module}")


@spark.command(
    "run",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Any Spark master URL; local mode by default.",
)
@click.argument("job")
@click.argument("job_arguments", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def run(context: CommandContext, master: str, job: str, job_arguments: tuple[str, ...]) -> None:
    """Run JOB until it stops; JOB_ARGUMENTS go to the job (`outbox spark run JOB --help`).

    Without --url or --url-file, executors read the database URL from OUTBOX_DATABASE_URL;
    when it is unset here it is set to this command's database (the embedded one if none is
    configured). Local executors inherit it; on any other master it is handed to every
    executor as spark.executorEnv.OUTBOX_DATABASE_URL, which the session redacts from the UI,
    event logs and plans.
    """
    from outbox_spark.jobs import load_job
    from outbox_spark.spark_session import outbox_session

    try:
        # `message_type_counts`, as its module is named, is the job `message-type-counts`.
        module = load_job(job.replace("_", "-"))
    except KeyError as error:
        raise click.BadParameter(str(error.args[0]), param_hint="JOB") from None
    arguments = module.argument_parser().parse_args(job_arguments)
    config: dict[str, str] = {}
    if arguments.url is None and arguments.url_file is None:
        url = context.database_url  # --database-url, else the variable, else the embedded one
        # Before the session starts: the JVM and its local Python workers copy the environment.
        os.environ[DATABASE_URL_VARIABLE] = url
        if not master.startswith("local"):
            # Executors on a cluster start on other hosts, from the worker's environment.
            config[f"spark.executorEnv.{DATABASE_URL_VARIABLE}"] = url
    session = outbox_session(master, app_name=f"outbox-{job}", config=config)
    query = module.start(session, arguments)
    query.awaitTermination()


@spark.command("archive")
@click.option("--publication", required=True, help="The publication to archive.")
@click.option(
    "--to",
    "uri",
    required=True,
    help="Where the archive is: a local path, file://, s3:// (s3a://), gs:// or hdfs:// URI."
    " Recorded in the database at the first run; readers find it there.",
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Any Spark master URL; local mode by default.",
)
@click.option(
    "--every",
    help="Keep running: archive again this long after catching up (60s, 5m, 1h, or seconds).",
)
@click.option(
    "--wait",
    is_flag=True,
    help="If another job archives the publication now, wait for it instead of exiting.",
)
@click.option(
    "--rows-per-range",
    type=click.IntRange(min=1),
    default=ArchiveDefaults.rows_per_range,
    show_default=True,
    help="The most messages one range (one Spark job, one catalog row) holds.",
)
@click.option(
    "--rows-per-file",
    type=click.IntRange(min=1),
    default=ArchiveDefaults.rows_per_file,
    show_default=True,
    help="About how many messages a Spark task writes (a file per UTC day of them).",
)
@click.option(
    "--url-file",
    help="A file holding the database URL, read on the driver and each executor (a mounted"
    " secret, or a file shipped with --files); default: this command's database.",
)
@click.pass_obj
def archive(
    context: CommandContext,
    publication: str,
    uri: str,
    master: str,
    every: str | None,
    wait: bool,
    rows_per_range: int,
    rows_per_file: int,
    url_file: str | None,
) -> None:
    """Archive PUBLICATION's messages below the safe frontier to Parquet at --to, each once,
    in ranges the database records: readers (catch-up subscriptions, the daemon, `outbox tail`,
    `outbox message show`, Spark's source with the archive option) then read the archive and
    the table as one history, and retention drops only archived messages of it.

    Without --url-file, executors read the database URL from OUTBOX_DATABASE_URL, set to this
    command's database (handed to every executor as spark.executorEnv on a cluster, redacted).
    Exits 2 at once when another job archives the publication (unless --wait).
    """
    check_name("publication", publication)
    interval = None if every is None else seconds_of(every, "--every")
    from pyspark.sql import SparkSession

    from outbox_spark.archive_job import ArchiveJob, ArchiveSettings, absolute_uri
    from outbox_spark.options import DatabaseLocation
    from outbox_spark.spark_session import outbox_session

    config: dict[str, str] = {}
    if url_file is None:
        url = context.database_url
        os.environ[DATABASE_URL_VARIABLE] = url
        if not master.startswith("local"):
            config[f"spark.executorEnv.{DATABASE_URL_VARIABLE}"] = url
    settings = ArchiveSettings(
        publication=publication,
        uri=absolute_uri(uri),
        database=DatabaseLocation(None, DATABASE_URL_VARIABLE, url_file, "--url"),
        rows_per_range=rows_per_range,
        rows_per_file=rows_per_file,
    )
    # py4j says at INFO when it closes its connection to the JVM: not the job's news.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Each range archived is logged (INFO); a progress bar would interleave with the lines.
    config["spark.ui.showConsoleProgress"] = "false"
    started: list[SparkSession] = []

    def session() -> SparkSession:
        spark = outbox_session(master, app_name=f"outbox-archive-{publication}", config=config)
        spark.sparkContext.setLogLevel("WARN")
        started.append(spark)
        return spark

    try:
        ranges = ArchiveJob(settings, stop, session).run(every=interval, wait=wait)
    finally:
        for spark in started:
            spark.stop()
    console().print(
        cell(
            f"{publication}: {ranges} range(s) archived to {settings.uri}"
            + ("" if ranges else "; nothing below the safe frontier was left to archive")
        )
    )


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def seconds_of(text: str, option: str) -> float:
    """`60s`, `5m`, `1h` or a number of seconds, above zero."""
    value = text.strip().lower()
    unit = _UNITS.get(value[-1:])
    number = value[:-1] if unit is not None else value
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise CommandUsageError(
            f"{option} {text!r} is not a duration: give seconds, or a number with s, m or h"
        )
    return seconds
