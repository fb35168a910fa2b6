"""The writer's trace context in a message's headers: recorded inside a span, through
OpenTelemetry's propagator; nothing changes, and nothing of OpenTelemetry is imported, where
it is not installed or not in use."""

import json
import subprocess
import sys
import textwrap

import psycopg
from opentelemetry import trace

import outbox
from poller.daemon.reporting import tracing
from tests.support.tracing import traced


def appended_headers(database_url: str, **headers: object) -> list[dict[str, object]]:
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "T", {}, headers=headers or None)
        outbox.append_many(conn, "orders", [outbox.NewMessage("T", {}, headers=headers or None)])
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT headers FROM outbox.messages ORDER BY position").fetchall()
    return [headers for (headers,) in rows]


THEIRS = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


def test_inside_a_span_append_records_its_context_and_the_callers_own_header_wins(
    database_url: str,
) -> None:
    with traced(), trace.get_tracer("app").start_as_current_span("business") as span:
        recorded = appended_headers(database_url, tenant="acme")
        given = appended_headers(
            database_url, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01"
        )
    context = span.get_span_context()
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert recorded == [{"traceparent": expected, "tenant": "acme"}] * 2
    assert given[2:] == [{"traceparent": THEIRS}] * 2


def test_outside_any_span_the_headers_are_what_was_given(database_url: str) -> None:
    assert appended_headers(database_url, tenant="acme") == [{"tenant": "acme"}] * 2
    assert appended_headers(database_url)[2:] == [{}, {}]


def test_the_api_without_a_tracer_provider_traces_nothing() -> None:
    assert tracing.span_recorder("s") is None  # every span would be a no-op


WITHOUT_OPENTELEMETRY = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    if sys.argv[2] == "absent":
        sys.meta_path.insert(0, NotInstalled())
    import psycopg
    import outbox, poller, outbox_relays
    from poller.daemon import runner  # the daemon, its metrics and its tracing gate
    from poller.daemon.background import DaemonThread
    from poller import operations
    import threading

    url = sys.argv[1]
    with psycopg.connect(url) as conn:
        operations.create(conn, "sub", "orders", "start", {})
        outbox.append(conn, "orders", "T", {}, headers={"tenant": "acme"})
    handled = threading.Event()
    seen = []
    def handler(message):
        seen.append(message.headers)
        handled.set()
    with DaemonThread(url, ["sub"], handler):
        assert handled.wait(30)
    relay = outbox_relays.handler("nats://127.0.0.1:4222?subject=s")
    print(json.dumps({
        "headers": seen,
        "imported": sorted(m for m in sys.modules if m.startswith("opentelemetry")),
    }))
    """
)


def test_without_opentelemetry_nothing_changes_and_nothing_of_it_is_imported(
    database_url: str,
) -> None:
    """In fresh processes: OpenTelemetry made impossible to import (as where it is not
    installed), then installed but unused. Appending, delivering and making a relay import
    none of it, and the message's headers are exactly what the application gave."""
    for installed in ("absent", "installed"):
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_OPENTELEMETRY, database_url, installed],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout.splitlines()[-1])
        assert said == {"headers": [{"tenant": "acme"}], "imported": []}, installed
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("DELETE FROM outbox.subscriptions")
            conn.execute("DELETE FROM outbox.messages")
