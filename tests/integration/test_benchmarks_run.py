"""The benchmarks stay runnable: `python -m bench writers --quick` against the test server.

Only that it runs and reports every variant; speed targets live in the benchmark's own output,
never in tests, because a test machine's speed says nothing about the code.
"""

import os
import re
import subprocess
import sys

import pytest

from bench import commit_order_bench, load_bench, retention_bench, writers_bench
from tests.support.databases import PROJECT_ROOT


def run_bench(server: str, *modules: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["OUTBOX_BENCH_DATABASE_URL"] = server
    done = subprocess.run(
        [sys.executable, "-m", "bench", *modules, "--quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def retention_then_writers(database_server: str) -> tuple[str, str, str]:
    """One run of the retention, writers and commit order benches, in that order, as `make
    bench` runs the first two (retention leaves partitions for later positions only, and the
    writers bench restarts positions at 1): each bench's part of the output. The tests below
    read one part each; a second run of the retention bench on its own cost ~9 s and showed
    nothing more."""
    output = run_bench(database_server, "retention", "writers", "commit_order")
    retention_starts = output.index(retention_bench.TITLE)
    writers_starts = output.index(writers_bench.TITLE)
    commit_order_starts = output.index(commit_order_bench.TITLE)
    assert retention_starts < writers_starts < commit_order_starts, output
    return (
        output[retention_starts:writers_starts],
        output[writers_starts:commit_order_starts],
        output[commit_order_starts:],
    )


def test_commit_order_benchmark_compares_both_defaults_in_every_workload(
    retention_then_writers: tuple[str, str, str],
) -> None:
    _, _, output = retention_then_writers
    for name, _, _ in commit_order_bench.WORKLOADS:
        assert name in output
    # Each workload, and the latency's p50 and p99.
    assert output.count(commit_order_bench.AFTER) == len(commit_order_bench.WORKLOADS) + 2
    assert re.search(r"\d\.\d\dx", output)


def test_writers_benchmark_reports_every_variant_with_ratios(
    retention_then_writers: tuple[str, str, str],
) -> None:
    _, output, _ = retention_then_writers
    header = next(line for line in output.splitlines() if "variant" in line)
    assert "ratio" in header
    for group in ("writers=1", "writers=4", "writers=16"):
        assert group in output
    for variant in [*writers_bench.VARIANTS, writers_bench.APPEND_ROWS, writers_bench.BATCH_ROWS]:
        assert variant in output
    assert re.search(r"\d\.\d\dx", output)  # ratios were computed, not left blank


def test_poller_and_consumer_group_benchmarks_report_ratios(database_server: str) -> None:
    output = run_bench(database_server, "poller", "subscriptions", "catch_up")
    for variant in (
        "raw read_batch query",
        "daemon, def handler no-op",
        "daemon, async def handler no-op",
        "daemon, batch handler no-op",
        "daemon, adaptive polling (default)",
        "daemon, writers notify=True",
        "pinned, 32 consumers, 1 ms handler",
        "round-robin, 8 consumers, 1 ms handler",
        "bare read loop",
        "subscribe (async)",
        "subscribe_sync",
        "the daemon, def handler",
    ):
        assert variant in output
    assert re.search(r"\d\.\d\dx", output)


def test_retention_benchmark_compares_partitions_with_delete(
    retention_then_writers: tuple[str, str, str],
) -> None:
    output, _, _ = retention_then_writers
    for text in (
        "retire partitions",
        "DELETE rows",
        "dead",
        "ATTACH PARTITION",  # the variant names wrap in the table; these words stay together
        "PARTITION OF",
    ):
        assert text in output
    assert re.search(r"\d\.\d\dx", output)


def test_load_benchmark_reports_latency_and_lag_under_paced_writers(database_server: str) -> None:
    output = run_bench(database_server, "load")
    for text in (
        "solo rate R",
        "p50 at 50% of R",
        "p99 at 90% of R",
        "lag growth at 90% of R",
        "aim <= 1.5x",
        "aim <= 2x",
        "aim: flat",
        "(a) commit to frontier",
        "(b) frontier to read",
        "(c) read to handler",
        "slowest 1%",
        "1,000 tx/s",
        "3,000 tx/s",
        "drain of a queued",
        *load_bench.AT_FIXED_RATE,
    ):
        assert text in output
    assert re.search(r"\d\.\d\dx", output)


def test_relays_benchmark_reports_each_answering_broker_against_its_client(
    database_server: str,
) -> None:
    output = run_bench(database_server, "relays")
    for broker in ("nats", "redis", "rabbitmq"):
        assert f"{broker}, 2,000 messages" in output
    assert "outbox relay" in output
    assert "latency, 16 writers" in output
    assert "daemon, async def no-op" in output
    if "not answering" not in output:
        for broker in ("nats", "redis", "rabbitmq"):
            assert f"{broker}, CPU per message" in output
        # Each broker's rate and CPU rows, and their ratios' baselines; its client loop's
        # p50 and p99 rows, and the relay's notes naming them.
        assert output.count("plain client loop") >= 12 + 6
        for broker in ("nats", "redis", "rabbitmq"):
            assert f"plain client loop to {broker}" in output
        # Three throughput ratios, three of CPU per message; at p50 and p99: the NATS relay
        # against the daemon, the two others against it, the two other client loops against
        # NATS's, and each relay against its own client loop in its note.
        assert len(re.findall(r"\d\.\d\dx", output)) == 6 + 2 * (5 + 3)
        assert output.count("x of it)") == 6


def test_tracing_benchmark_compares_with_opentelemetry_absent_unused_and_configured(
    database_server: str,
) -> None:
    output = run_bench(database_server, "tracing")
    for text in ("not installed", "installed, unused", "configured", "us/append", "msg/s"):
        assert text in output
    assert len(re.findall(r"\d\.\d\dx", output)) == 4  # each of two groups, twice
