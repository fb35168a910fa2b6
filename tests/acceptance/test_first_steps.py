"""What a newcomer meets first, run as they would: `--version`, `poll --help`, the position
`append` returns taken by `message show`, positions in log lines and outputs, and the demo's
output in one file."""

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import psycopg

import outbox
from tests.support.cli import outbox_command, outbox_environment, outbox_succeeds
from tests.support.daemons import daemon_group
from tests.support.databases import PROJECT_ROOT

END_MARKER = "9223372036854775807"  # the position part of `--from end`, a bigint's maximum


def test_version_names_the_installed_distribution() -> None:
    done = outbox_command(["--version"], None)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"outbox, version {importlib.metadata.version('outbox-poller')}\n"


def test_poll_help_marks_what_is_required_and_shows_an_example() -> None:
    done = outbox_command(["poll", "--help"], None)
    assert done.returncode == 0, done.stderr
    helped = " ".join(done.stdout.split())
    assert "--handler TEXT package.module:callable [required, here or in --config]" in helped
    assert "--subscription TEXT Repeat for several. [required, here or in --config]" in helped
    assert "outbox poll --subscription billing --handler myapp.handlers:on_order" in helped


def test_message_show_takes_the_position_append_returns(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        position = outbox.append(conn, "orders", "OrderPlaced", {"n": 1}, message_id="order-7")
    shown = outbox_succeeds(database_url, "message", "show", "orders", "--position", str(position))
    assert "order-7" in shown
    missing = outbox_command(["message", "show", "orders", "--position", "999"], database_url)
    assert missing.returncode == 1
    assert missing.stderr == "Error: publication 'orders' has no message at 999\n"
    refused = outbox_command(["message", "show", "orders", "--position", "7x"], database_url)
    assert refused.returncode == 2
    assert refused.stderr.startswith("Error: position '7x' is not POS or TX:POS")


def test_the_end_of_a_transaction_reads_as_words_in_outputs_and_log_lines(
    database_url: str, tmp_path: Path
) -> None:
    created = outbox_succeeds(
        database_url, "subscription", "create", "billing", "--publication", "o"
    )
    assert re.fullmatch(r"created billing on o, starting after end of transaction \d+\n", created)
    sought = outbox_succeeds(database_url, "seek", "billing", "--to", "end")
    assert re.fullmatch(r"billing now after end of transaction \d+ \(epoch 1\)\n", sought)
    skip = outbox_command(["skip", "billing", "--to", "end"], database_url)
    assert END_MARKER not in skip.stdout + skip.stderr
    with daemon_group(database_url, tmp_path) as daemons:
        daemon = daemons.start("billing")
        daemon.wait_for_log(r"leading billing from end of transaction \d+ \(epoch 1\)", 30)
        assert daemon.terminate() == 0
    assert re.search(r"stopped billing at end of transaction \d+", daemon.log())
    assert END_MARKER not in daemon.log()


def test_the_demo_ends_its_table_before_the_next_log_line(database_url: str) -> None:
    """stdout and stderr into one file, as `outbox demo > demo.log 2>&1` or a CI log does."""
    done = subprocess.run(
        [sys.executable, "-m", "outbox_cli", "demo", "--writers", "1", "--transactions", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=outbox_environment(database_url, OUTBOX_LOG_LEVEL="INFO"),
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    records = re.findall(r"(?m)^(.*?)\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO ", done.stdout)
    assert records, done.stdout
    assert all(before == "" for before in records), done.stdout
    assert END_MARKER not in done.stdout
