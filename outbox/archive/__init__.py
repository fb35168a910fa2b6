"""A publication's history in the lake: the archive's layout and catalog, shared by the Spark
job that writes it (outbox_spark) and every reader (the daemon, catch-up subscriptions, the
operator's commands, Spark's source). `layout` and `catalog` need psycopg alone; `files`
reads and writes the Parquet files and needs pyarrow (the `archive` extra)."""
