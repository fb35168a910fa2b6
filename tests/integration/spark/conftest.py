"""One local Spark session for every Spark test, and password-less URLs for the source.

The source refuses a URL with a password, as it would in production; when the test server
has one, a .pgpass file written before Spark starts lets libpq find it on the executors.
"""

import os
import shutil
from collections.abc import Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pyspark.sql import SparkSession

from outbox_spark.spark_session import outbox_session
from tests.integration.spark.spark_doubles import FailingOutboxSource
from tests.integration.spark.standalone_cluster import StandaloneCluster, standalone_cluster


def without_password(url: str) -> str:
    parts = conninfo_to_dict(url)
    parts.pop("password", None)
    return make_conninfo("", **parts)


@pytest.fixture(scope="session")
def spark(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        # Spark runs on a JVM, a system package pip cannot install; say so instead of erroring.
        pytest.skip("Spark needs a Java runtime: none on PATH and JAVA_HOME is unset")
    password = conninfo_to_dict(database_server).get("password")
    if password:
        passfile = tmp_path_factory.mktemp("pgpass") / ".pgpass"
        escaped = str(password).replace("\\", "\\\\").replace(":", "\\:")
        passfile.write_text(f"*:*:*:*:{escaped}\n")
        passfile.chmod(0o600)
        # Read by libpq in every Python worker: they inherit the environment Spark starts with.
        os.environ["PGPASSFILE"] = str(passfile)
    session = outbox_session(
        "local[2]",
        app_name="outbox-pipeline-tests",
        config={
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.streaming.stopTimeout": "30s",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(FailingOutboxSource)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and two workers for the whole session, stopped at its end."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime: none on PATH and JAVA_HOME is unset")
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture
def source_url(database_url: str) -> str:
    """The test database's URL as the source takes it: no password."""
    return without_password(database_url)
