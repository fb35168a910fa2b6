"""bench/standby_bench.py stays runnable (`python -m bench standby --quick`): reads on the
standby against reads on the primary, with the primary's CPU per message. Figures are the
bench's own output, never asserted here (test_benchmarks_run.py says why)."""

import re

import pytest

from tests.integration.test_benchmarks_run import run_bench
from tests.support.replica_pair import ReplicaPairUnavailableError, binaries


def test_the_standby_benchmark_compares_standby_reads_with_primary_reads(
    database_server: str,
) -> None:
    try:
        binaries()
    except ReplicaPairUnavailableError as error:
        pytest.skip(str(error))
    output = run_bench(database_server, "standby")
    for text in (
        "drain 5,000 messages",
        "primary CPU per message, drain",
        "latency p99 at ~500 msg/s",
        "primary CPU per message, at ~500 msg/s",
        "reads on the primary",
        "reads on the standby",
    ):
        assert text in output
    assert re.search(r"\d\.\d\dx", output)  # ratios against reads on the primary
