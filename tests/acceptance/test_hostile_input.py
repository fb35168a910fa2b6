"""Hostile values thrown at every command: each fails cleanly and changes nothing.

For each case: exit code 1 or 2, no traceback, the value named in the output (escaped, or a
recognisable start of it), no raw terminal escape written, and the database unchanged. The
cases of one command run concurrently (each is a subprocess of about a second) against one
seeded database, snapshotted before and after.
"""

import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

import outbox
from outbox_cli.printing import escaped
from tests.support.cli import outbox_command
from tests.support.databases import DatabaseFactory

ESCAPE = "\x1b]0;pwned\x07"
# argv takes about 128 KB per argument; the 10 MB value goes through a file.
LONG = "L" * 100_000
HUGE = "H" * 10_000_000

# Names a subscription lookup must refuse as "does not exist", naming them.
HOSTILE_NAMES = [
    'it\'s "quoted"',
    "x'; DROP TABLE outbox.messages; --",
    "[/]",
    "[bold]x[/bold]",
    ESCAPE,
    "名前🙂\u202e",
    "",
    " \t ",
    LONG,
]
# Values that are not start, end or TX:POS, or that do not fit.
HOSTILE_POSITIONS = [
    "[/]",
    ESCAPE,
    "1;2",
    "",
    " ",
    "-1:0",
    "1:99999999999999999999",
    "99999999999999999999:1",
    "9223372036854775807:0",  # fits a bigint, but that transaction has not happened yet
    LONG,
]
HUGE_NUMBERS = ["-1", "0", "99999999999999999999", "1e3", "[/]"]


@dataclass
class Case:
    arguments: list[str]
    # The value the output must name: shown escaped, quoted, or cut to a recognisable start.
    value: str
    environment: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def named(value: str, output: str) -> bool:
    if value == "":
        return "''" in output
    return any(needle in output for needle in (repr(value)[:40], escaped(value)[:40], value[:40]))


def some(values: list[str], first: int, count: int = 3) -> list[str]:
    """`count` of `values` from `first` on (wrapping): each command gets a representative few,
    and across commands every value is thrown (a case costs a second of CPU)."""
    return [values[(first + n) % len(values)] for n in range(count)]


def name_cases(command: Callable[[str], list[str]], first: int) -> list[Case]:
    return [Case(command(name), name) for name in some(HOSTILE_NAMES, first)]


CASES: dict[str, list[Case]] = {
    "subscription create": [
        Case(["subscription", "create", "", "--publication", "orders"], ""),
        Case(["subscription", "create", "new", "--publication", LONG], LONG),
        Case(["subscription", "create", "billing", "--publication", "orders"], "billing"),
        *(
            Case(["subscription", "create", "new", "--publication", "o", "--from", p], p)
            for p in some(HOSTILE_POSITIONS, 0, 4)
        ),
    ],
    "subscription update": name_cases(
        lambda name: ["subscription", "update", name, "--consumers", "2"], 0
    ),
    "subscription delete": name_cases(lambda name: ["subscription", "delete", name], 3),
    "seek": [
        *name_cases(lambda name: ["seek", name, "--to", "end"], 6),
        *(Case(["seek", "billing", "--to", p], p) for p in some(HOSTILE_POSITIONS, 4, 6)),
    ],
    "parked": [
        *name_cases(lambda name: ["parked", "list", name], 1),
        *(Case(["parked", "list", "billing", "--limit", n], n) for n in HUGE_NUMBERS[:3]),
        *name_cases(lambda name: ["parked", "replay", name], 4),
        *name_cases(lambda name: ["parked", "purge", name, "--yes"], 7),
        Case(["parked", "purge", "billing"], "--yes"),  # no terminal to confirm on
    ],
    "message show": [
        *(Case(["message", "show", "orders", "--id", n], n) for n in some(HOSTILE_NAMES, 2)),
        *(Case(["message", "show", n, "--id", "m-1"], n) for n in some(HOSTILE_NAMES, 5)),
        *(
            Case(["message", "show", "orders", "--position", p], p)
            for p in some(HOSTILE_POSITIONS, 0, 2)
        ),
        Case(["message", "show", "orders"], "--id"),
    ],
    "poll": [
        *(
            Case(["poll", "--subscription", name, "--handler", "json:loads"], name)
            for name in some(HOSTILE_NAMES, 8)
        ),
        *(
            Case(["poll", "--subscription", "billing", "--handler", spec], spec)
            for spec in ["../etc:passwd", ESCAPE, "", "json:nope"]
        ),
        Case(
            [
                "poll",
                "--subscription",
                "billing",
                "--handler",
                "json:loads",
                "--lease-seconds",
                "-1",
            ],
            "-1",
        ),
        Case(["poll", "--config", "{dir}/huge.toml"], HUGE, files={"huge.toml": HUGE}),
        Case(["poll", "--config", "{dir}/nul.toml"], "a\\x00b", files={"nul.toml": "NUL"}),
        Case(["poll", "--config", "{dir}/str.toml"], "billing", files={"str.toml": "STRING"}),
        Case(["poll", "--config", "{dir}/key.toml"], "subscription", files={"key.toml": "KEY"}),
        Case(["poll", "--config", "{dir}/bad.toml"], "bad.toml", files={"bad.toml": "BROKEN"}),
    ],
    "database url": [
        Case(arguments, url, environment={"OUTBOX_DATABASE_URL": url})
        for arguments, url in zip(
            [["status"], ["subscription", "list"], ["migrate"]] * 2,
            [
                "[/]",
                ESCAPE,
                "x'; DROP TABLE outbox.messages; --",
                "postgresql://postgres@127.0.0.1:5432/postgres?sslmode=bogus",
                "postgresql://postgres@127.0.0.1:1/x",
                "postgresql://" + "u" * 100_000,
            ],
            strict=True,
        )
    ],
    "log level": [
        Case(["--log-level", "[/]", "status"], "[/]"),
        *(
            Case(["status"], level, environment={"OUTBOX_LOG_LEVEL": level})
            for level in [ESCAPE, LONG]
        ),
    ],
    "demo": [
        Case(["demo", "--writers", "-1"], "-1"),
        Case(["demo", "--writers", "99999999999999999999"], "99999999999999999999"),
        Case(["demo", "--transactions", "0"], "0"),
        # Refused before anything runs, naming the variable, not at the first append.
        *(
            Case(
                ["demo", "--writers", "1", "--transactions", "1"],
                f"OUTBOX_MAX_PAYLOAD_BYTES={value!r} is refused",
                environment={"OUTBOX_MAX_PAYLOAD_BYTES": value},
            )
            for value in ["abc", "0"]
        ),
    ],
}

# File contents the config cases refer to by marker (the huge one is written from HUGE).
CONFIG_FILES = {
    "NUL": 'handler = "json:loads"\nsubscriptions = ["a\\u0000b"]\n',
    "STRING": 'handler = "json:loads"\nsubscriptions = "billing"\n',
    "KEY": 'handler = "json:loads"\nsubscription = ["billing"]\n',
    "BROKEN": 'handler = "json:loads\nsubscriptions = [\n',
}


def config_text(content: str) -> str:
    if content == HUGE:
        return f'handler = "json:loads"\nsubscriptions = ["{HUGE}"]\n'
    return CONFIG_FILES[content]


@pytest.fixture(scope="module")
def seeded_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """A subscription `billing` on `orders` with two messages and a parked one."""
    url = database_factory.create()
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO outbox.subscriptions (subscription_id, publication_id) "
            "VALUES ('billing', 'orders')"
        )
        position = outbox.append(conn, "orders", "OrderPlaced", {"n": 1}, message_id="m-1")
        outbox.append(conn, "orders", "OrderPlaced", {"n": 2})
        conn.execute(
            "INSERT INTO outbox.parked_messages "
            "(subscription_id, position, transaction_id, attempts, last_error) "
            "SELECT 'billing', position, transaction_id, 3, 'boom [/]' "
            "FROM outbox.messages WHERE position = %s",
            (position,),
        )
    yield url
    database_factory.drop(url)


def snapshot(url: str) -> tuple[Any, ...]:
    with psycopg.connect(url) as conn:
        return tuple(
            conn.execute(query).fetchall()
            for query in (
                "SELECT * FROM outbox.subscriptions ORDER BY subscription_id",
                "SELECT * FROM outbox.subscription_leaders ORDER BY subscription_id",
                "SELECT * FROM outbox.parked_messages ORDER BY subscription_id, position",
                "SELECT count(*) FROM outbox.messages",
            )
        )


def run_case(case: Case, url: str, directory: Path) -> subprocess.CompletedProcess[str]:
    for name, content in case.files.items():
        (directory / name).write_text(config_text(content), encoding="utf-8")
    arguments = [argument.replace("{dir}", str(directory)) for argument in case.arguments]
    environment = {"OUTBOX_DATABASE_URL": url, **case.environment}
    return outbox_command(arguments, None, variables=environment)


@pytest.mark.parametrize("command", list(CASES))
def test_hostile_values_fail_cleanly_and_change_nothing(
    command: str, seeded_url: str, tmp_path: Path
) -> None:
    cases = CASES[command]
    before = snapshot(seeded_url)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda case: run_case(case, seeded_url, tmp_path), cases))
    problems = []
    for case, done in zip(cases, results, strict=True):
        output = done.stdout + done.stderr
        shown = f"{[argument[:60] for argument in case.arguments]} -> {output[-300:]!r}"
        if done.returncode not in (1, 2):
            problems.append(f"exit {done.returncode}: {shown}")
        if "Traceback" in output:
            problems.append(f"traceback: {shown}")
        if "\x1b" in output or "\x07" in output:
            problems.append(f"raw terminal escape: {shown}")
        if not named(case.value, output):
            problems.append(f"does not name {case.value[:40]!r}: {shown}")
        if len(output) > 5_000:
            problems.append(f"{len(output)} characters of output: {shown[:300]}")
    assert not problems, "\n".join(problems)
    assert snapshot(seeded_url) == before
