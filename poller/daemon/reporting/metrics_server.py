"""`--metrics-port`: /metrics for Prometheus, /healthz and /readyz for Kubernetes probes.

A small WSGI server on its own thread: a scrape's database visit never blocks the event loop,
and /healthz can tell a loop that stopped turning (a blocking `async def` handler) from a busy
one, since it asks the loop itself.
"""

import logging
import socketserver
import threading
from collections.abc import Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import make_wsgi_app

from poller.daemon.reporting.metrics import DaemonMetrics
from poller.daemon.reporting.metrics_collector import StateCollector

log = logging.getLogger(__name__)


class MetricsPortError(OSError):
    """The metrics port cannot be bound (taken, or privileged)."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    # A slow scrape (the database is slow) must not hold a probe back.
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds would fill the log with access lines."""


class MetricsServer:
    def __init__(self, server: WSGIServer) -> None:
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="outbox-metrics", daemon=True
        )
        self._thread.start()

    @classmethod
    def start(cls, metrics: DaemonMetrics, database_url: str, port: int) -> "MetricsServer":
        """Serve on every interface (a probe comes to the pod's address); raises
        MetricsPortError, naming the port, if it cannot be bound."""
        metrics.registry.register(StateCollector(metrics, database_url))
        scrape: WSGIApplication = make_wsgi_app(metrics.registry)  # typed as a bare Callable

        def application(environ: WSGIEnvironment, respond: StartResponse) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return scrape(environ, respond)
            if path == "/healthz":
                return _probe(respond, *metrics.alive())
            if path == "/readyz":
                return _probe(respond, *metrics.ready())
            respond("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: try /metrics, /healthz or /readyz\n"]

        try:
            server = make_server(
                "", port, application, server_class=_ThreadingServer, handler_class=_QuietHandler
            )
        except OSError as error:
            raise MetricsPortError(
                f"cannot serve metrics on port {port}: {error.strerror or error}"
            ) from None
        log.info("metrics on port %s: /metrics, /healthz, /readyz", port)
        return cls(server)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _probe(respond: StartResponse, ok: bool, text: str) -> list[bytes]:
    respond(
        "200 OK" if ok else "503 Service Unavailable",
        [("Content-Type", "text/plain; charset=utf-8")],
    )
    return [text.encode() + b"\n"]
