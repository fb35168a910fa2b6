"""A SparkSession with the outbox source registered.

Spark starts its Python workers with `python3` from PATH unless PYSPARK_PYTHON says
otherwise, and that interpreter lacks this project's packages in a virtualenv, so the
session pins the workers to the interpreter running it (unless the caller chose one).
"""

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from outbox.names import DATABASE_URL_VARIABLE
from outbox_spark.source import OutboxDataSource

# Spark shows a setting as *********(redacted) in its UI, event logs and plans when the name or
# the value matches spark.redaction.regex. Spark's default, plus: any setting named after the
# database URL (spark.executorEnv.OUTBOX_DATABASE_URL), and any value holding a URL with a
# password (user:password@).
REDACTION_REGEX = (
    r"(?i)secret|password|token|access[.]?key"
    rf"|{DATABASE_URL_VARIABLE}|://[^/@\s]*:[^/@\s]*@"
)


def outbox_session(
    master: str | None = None,
    app_name: str = "outbox-pipeline",
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or join) a session; `master` None keeps spark-submit's, else local[*]."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = {
        "spark.redaction.regex": REDACTION_REGEX,
        # Windows and timestamps in UTC, as the outbox stores them, whatever the host zone.
        "spark.sql.session.timeZone": "UTC",
    }
    if master is not None and master.startswith("local"):
        # 200 shuffle tasks per micro-batch (the default) dominate a run on one machine.
        settings["spark.sql.shuffle.partitions"] = "4"
        settings["spark.ui.enabled"] = "false"
    settings.update(config or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.dataSource.register(OutboxDataSource)
    return session
