"""`outbox spark`: what it does before any Spark starts."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from outbox_cli.context import CommandContext
from outbox_cli.settings import CommandLineSettings
from outbox_cli.spark_command import spark

CONTEXT = CommandContext(CommandLineSettings(database_url="postgresql://app@db/app"))


def test_importing_the_command_group_imports_no_spark() -> None:
    # `outbox --help` imports every command group; pyspark would cost seconds and a JVM check.
    code = "import sys, outbox_cli.spark_command; print('pyspark' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_jobs_are_listed() -> None:
    result = CliRunner().invoke(spark, ["jobs"], obj=CONTEXT)
    assert result.exit_code == 0
    assert "message-type-counts\toutbox_spark.jobs.message_type_counts" in result.output


def test_an_unknown_job_is_named_with_the_known_ones() -> None:
    result = CliRunner().invoke(spark, ["run", "message-count"], obj=CONTEXT)
    assert result.exit_code == 2
    assert "no job 'message-count'; jobs: message-type-counts" in result.output


@pytest.mark.parametrize("job", ["message-type-counts", "message_type_counts"])
def test_job_arguments_are_checked_by_the_job_before_spark_starts(job: str) -> None:
    """The job's module name is accepted as its name too (the README used to give it). The
    subscription its progress is kept in is named by whoever runs it: it holds retention back
    until deleted, so it must not be one nobody knows of."""
    result = CliRunner().invoke(spark, ["run", job, "--output", "x"], obj=CONTEXT)
    assert result.exit_code == 2
    assert (
        "the following arguments are required: --publication, --subscription, --checkpoint"
        in result.output
    )
