"""What OpenTelemetry costs: append, and the daemon's drain rate, without it and with it.

Each variant runs in a process of its own, as an application would be: OpenTelemetry not
installed (made unimportable), installed but unused (never imported), and configured (the
SDK's tracer provider with a batch span processor whose exporter drops the spans: the work an
application pays before the network). Appends run inside a span there (each message then
carries a traceparent), and the daemon makes a consumer span per handler call.
"""

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.common import Measurement

TITLE = "Tracing: OpenTelemetry's cost on append and on the daemon's delivery rate"
MODES = ("not installed", "installed, unused", "configured")

_BLOCK = """
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, _NotInstalled())
"""


def run(database_url: str, quick: bool) -> list[Measurement]:
    appends = 2_000 if quick else 50_000
    drained = 5_000 if quick else 300_000
    measurements: list[Measurement] = []
    for mode in MODES:
        said = _variant(database_url, mode, appends, drained)
        baseline = None if mode == MODES[0] else MODES[0]
        measurements += [
            Measurement(
                f"append, {appends:,} in one transaction",
                mode,
                said["append_us"],
                "us/append",
                baseline,
                higher_is_better=False,
            ),
            Measurement(
                f"drain {drained:,}, def handler no-op",
                mode,
                said["drain_rate"],
                "msg/s",
                baseline,
            ),
        ]
    return measurements


def _variant(database_url: str, mode: str, appends: int, drained: int) -> dict[str, float]:
    prelude = _BLOCK if mode == "not installed" else ""
    code = f"{prelude}\nfrom bench.tracing_bench import measure\nmeasure()"
    done = subprocess.run(
        [sys.executable, "-c", code, database_url, mode, str(appends), str(drained)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[1],  # where `bench` is importable, as `python -m bench`
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tracing bench, {mode}: {done.stderr.strip()}")
    said: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return said


def measure() -> None:
    """In the variant's own process: argv is the database URL, the mode, the counts."""
    from poller.daemon import garbage_collection

    database_url, mode, appends, drained = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5])
    garbage_collection.set_for_daemon()  # as `outbox poll` runs
    span = _configure() if mode == "configured" else None
    print(
        json.dumps(
            {
                "append_us": _append_time(database_url, appends, span) * 1e6,
                "drain_rate": _drain_rate(database_url, drained, span),
            }
        )
    )


def _configure() -> Any:
    from collections.abc import Sequence

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:  # noqa: ARG002
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("bench").start_as_current_span


def _append_time(database_url: str, count: int, span: Any) -> float:
    """Seconds per `outbox.append`, in one transaction (the writer's own cost and a round
    trip each), inside a span when configured."""
    import outbox

    with psycopg.connect(database_url) as conn:
        conn.execute("DELETE FROM outbox.messages WHERE publication_id = 'tracing-append'")
        started = time.perf_counter()
        if span is None:
            for n in range(count):
                outbox.append(conn, "tracing-append", "T", {"n": n})
        else:
            with span("business"):
                for n in range(count):
                    outbox.append(conn, "tracing-append", "T", {"n": n})
        elapsed = time.perf_counter() - started
        conn.rollback()
    return elapsed / count


def _drain_rate(database_url: str, count: int, span: Any) -> float:
    """The daemon's drain of `count` messages, each carrying a traceparent when configured
    (as appended inside a span), by a `def` no-op handler."""
    from bench import poller_bench

    publication = f"tracing-drain-{time.monotonic_ns()}"
    poller_bench.fill(database_url, publication, count)
    if span is not None:
        traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with psycopg.connect(database_url) as conn:
            conn.execute(
                "UPDATE outbox.messages SET headers = jsonb_build_object('traceparent', %s::text)"
                " WHERE publication_id = %s",
                (traceparent, publication),
            )
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE outbox.messages")
    return poller_bench.daemon_drain_rate(database_url, publication, count, "def handler")
