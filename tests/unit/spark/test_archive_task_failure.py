"""The one line `outbox spark archive` prints for a task that failed, out of Spark's report."""

from outbox_spark.archive_job import task_failure

SPARK_REPORT = "\n".join(
    [
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collect.",
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 failed",
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):",
        '  File "/app/outbox/archive/files.py", line 97, in store',
        "    stream.write(data)",
        "OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on"
        " device",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "/app/outbox_spark/archive_tasks.py", line 40, in __call__',
        "outbox.archive.errors.ArchiveFileError: archive file file:///lake/part-1.parquet cannot"
        " be written: [Errno 28] No space left on device",
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handle(Runner.scala:601)",
    ]
)


def test_the_archive_s_own_error_is_the_line() -> None:
    assert task_failure(RuntimeError(SPARK_REPORT)) == (
        "archive file file:///lake/part-1.parquet cannot be written: [Errno 28] No space left"
        " on device"
    )


def test_else_the_last_python_error_line() -> None:
    report = SPARK_REPORT.split("The above exception")[0]
    assert task_failure(RuntimeError(report)) == (
        "OSError: [Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on"
        " device"
    )


def test_else_the_first_line() -> None:
    assert task_failure(RuntimeError("the JVM went away\nmore")) == "the JVM went away"
