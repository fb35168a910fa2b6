"""`outbox spark ...`: Spark jobs over the outbox (needs the `spark` extra).

pipeline (hence pyspark and a JVM) is imported inside the commands, so `outbox --help` and
every other command start without them.
"""

import os

import click

from outbox.names import DATABASE_URL_VARIABLE
from outbox_cli.context import CommandContext


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
