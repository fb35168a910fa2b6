"""Messages of a publication per type and time window, with the sum of `data.amount`, as Parquet.

    outbox spark run message-type-counts --publication orders --subscription order-counts \\
        --output out --checkpoint ck
    spark-submit --master URL outbox_spark/jobs/message_type_counts.py --publication orders ...

Windows are on `appended_at` (the writer's transaction start, UTC) and a window's row is written
once the watermark passes its end: when messages `--watermark` later than the window end have
been read. A transaction held open longer than the watermark commits messages that are already
too late for their window and are left out of it, so keep the watermark above the longest
transaction your writers run. The checkpoint makes the output exactly once across restarts.
"""

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as f
from pyspark.sql.streaming.query import StreamingQuery

from outbox_spark.jobs import add_source_arguments, source_options
from outbox_spark.spark_session import outbox_session

NAME = "message-type-counts"


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=NAME, description="Messages per type and time window of a publication, as Parquet."
    )
    add_source_arguments(parser)
    parser.add_argument("--output", required=True, help="the Parquet directory")
    parser.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory")
    parser.add_argument("--window", default="1 minute")
    parser.add_argument("--watermark", default="10 minutes", help="how late a message may be")
    return parser


def counts(messages: DataFrame, window: str, watermark: str) -> DataFrame:
    amount = f.from_json("data", "amount DOUBLE").getField("amount")
    return (
        messages.withWatermark("appended_at", watermark)
        .groupBy(f.window("appended_at", window).alias("window"), "message_type")
        .agg(f.count(f.lit(1)).alias("messages"), f.sum(amount).alias("amount"))
        .select(
            f.col("window.start").alias("window_start"),
            f.col("window.end").alias("window_end"),
            "message_type",
            "messages",
            "amount",
        )
    )


def start(spark: SparkSession, arguments: argparse.Namespace) -> StreamingQuery:
    messages = spark.readStream.format("outbox").options(**source_options(arguments)).load()
    writer = (
        counts(messages, arguments.window, arguments.watermark)
        .writeStream.format("parquet")
        .outputMode("append")
        .option("path", arguments.output)
        .option("checkpointLocation", arguments.checkpoint)
    )
    if arguments.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=arguments.trigger_interval)
    return writer.start()


if __name__ == "__main__":
    # spark-submit: the master and the rest of the configuration come from its command line.
    start(outbox_session(), argument_parser().parse_args()).awaitTermination()
