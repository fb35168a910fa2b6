"""`outbox tail` as a user runs it: --plain in a pipe, Ctrl-C, and refused options."""

import queue
import signal
import subprocess
import sys
import threading

import psycopg
import pytest

import outbox
from tests.support.cli import outbox_command, outbox_environment
from tests.support.databases import PROJECT_ROOT, DatabaseFactory
from tests.support.locked_writers import append_through_a_row_lock
from tests.support.safe_frontier import wait_until_all_rows_are_backlog

LINE_TIMEOUT = 30


class LineReader:
    """The lines a process prints, read on a thread so a test can wait for each with a
    deadline instead of blocking forever on a silent pipe."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout

        def read_lines() -> None:
            for line in stdout:
                self._lines.put(line)

        threading.Thread(target=read_lines, daemon=True).start()

    def next(self) -> str:
        try:
            return self._lines.get(timeout=LINE_TIMEOUT).rstrip("\n")
        except queue.Empty:
            raise AssertionError(f"no line printed within {LINE_TIMEOUT} s") from None


def start_plain_tail(url: str, *arguments: str) -> subprocess.Popen[str]:
    """The tail as a terminal starts it. A suite started in the background inherits SIGINT
    ignored (a shell without job control ignores it for `&` commands) and would pass that on:
    a tail deaf to Ctrl-C, as any program started that way is. A handler in this process is
    reset to the default in the child instead."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "outbox_cli", "tail", "--plain", *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=outbox_environment(
                url, OUTBOX_CHECKPOINT_INTERVAL="2", OUTBOX_CHECKPOINT_TIMEOUT_SECS="3600"
            ),
            cwd=PROJECT_ROOT,
        )
    finally:
        signal.signal(signal.SIGINT, previous)


def append(url: str, message_type: str, key: str, data: dict[str, object]) -> tuple[int, int]:
    """One committed message; its (transaction id, position)."""
    with psycopg.connect(url) as conn:
        position = outbox.append(conn, "orders", message_type, data, partition_key=key)
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0]), position


def test_plain_prints_the_backlog_caught_up_live_lines_and_checkpoints_then_ctrl_c_ends_it(
    database_url: str,
) -> None:
    backlog = append(database_url, "OrderPlaced", "customer-1", {"n": 1})
    wait_until_all_rows_are_backlog(database_url)
    tail = start_plain_tail(database_url, "--publication", "orders", "--from", "start")
    try:
        lines = LineReader(tail)
        assert lines.next() == f'{backlog[0]}:{backlog[1]}\tOrderPlaced\tcustomer-1\t{{"n": 1}}'
        assert lines.next() == "[CAUGHT UP]"
        first = append(database_url, "OrderShipped", "customer-1", {"n": 2})
        second = append(database_url, "OrderPlaced", "customer-2", {"text": "x" * 300})
        assert lines.next().startswith(f"{first[0]}:{first[1]}\tOrderShipped\t")
        assert lines.next().endswith("x" * 300 + '"}')  # the whole data, not a cut
        assert lines.next() == f"[CHECKPOINT tx={second[0]} pos={second[1]}]"
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=30) == 0
        assert tail.stderr is not None
        assert tail.stderr.read() == ""
    finally:
        tail.kill()
        tail.wait()


def test_plain_ends_when_its_reader_closes_the_pipe_on_a_quiet_publication(
    database_url: str,
) -> None:
    """`outbox tail --plain | head -1`: head reads one line and exits. A tail that only wrote
    when a message came never learnt of it on a quiet publication, and ran for ever."""
    tail = start_plain_tail(database_url, "--publication", "quiet")
    try:
        assert tail.stdout is not None
        assert tail.stdout.readline() == "[CAUGHT UP]\n"
        tail.stdout.close()  # what head does once it has its line
        assert tail.wait(timeout=10) == 0
        assert tail.stderr is not None
        assert tail.stderr.read() == ""
    finally:
        tail.kill()
        tail.wait()


def test_plain_with_type_and_key_filters_shows_only_matching_messages(database_url: str) -> None:
    tail = start_plain_tail(
        database_url, "--publication", "orders", "--type", "OrderPlaced", "--key", "customer-2"
    )
    try:
        lines = LineReader(tail)
        assert lines.next() == "[CAUGHT UP]"
        append(database_url, "OrderShipped", "customer-2", {"n": 1})
        append(database_url, "OrderPlaced", "customer-1", {"n": 2})
        wanted = append(database_url, "OrderPlaced", "customer-2", {"n": 3})
        assert lines.next().startswith(f"{wanted[0]}:{wanted[1]}\tOrderPlaced\tcustomer-2\t")
    finally:
        tail.kill()
        tail.wait()


@pytest.mark.parametrize(
    ("arguments", "environment", "named"),
    [
        (["--from", "yesterday"], {}, "'yesterday'"),
        (["--from", "12:x"], {}, "'12:x'"),
        ([], {"OUTBOX_CHECKPOINT_INTERVAL": "0"}, "OUTBOX_CHECKPOINT_INTERVAL"),
        ([], {"OUTBOX_CHECKPOINT_TIMEOUT_SECS": "soon"}, "'soon'"),
    ],
)
def test_a_bad_option_is_one_line_naming_the_value(
    database_url: str, arguments: list[str], environment: dict[str, str], named: str
) -> None:
    done = outbox_command(
        ["tail", "--plain", "--publication", "orders", *arguments],
        database_url,
        variables=environment,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_publication_name_is_refused(database_url: str) -> None:
    done = outbox_command(["tail", "--plain", "--publication", "bad\nname"], database_url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "publication" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_database_without_the_schema_is_one_line_and_exit_1(
    database_factory: DatabaseFactory,
) -> None:
    url = database_factory.create(migrated=False)
    try:
        done = outbox_command(["tail", "--publication", "orders"], url)
    finally:
        database_factory.drop(url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "outbox migrate" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_plain_prints_a_keys_messages_in_commit_order(database_url: str) -> None:
    """The two writers of tests/support/locked_writers.py: the later commit holds the older
    transaction id, and the tail still prints it second."""
    pair = append_through_a_row_lock(database_url)
    wait_until_all_rows_are_backlog(database_url)
    tail = start_plain_tail(database_url, "--publication", "orders", "--from", "start")
    try:
        lines = LineReader(tail)
        printed = [lines.next(), lines.next()]
    finally:
        tail.kill()
        tail.wait(timeout=30)
    assert [line.split("\t")[1] for line in printed] == ["First", "Second"]
    assert printed[0].startswith(f"{pair.first.transaction_id}:{pair.first.position}\t")
