"""Talking to a daemon's metrics port as Prometheus and the kubelet do: plain HTTP GETs."""

import socket
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick; the daemon binds it next)."""
    with socket.socket() as sock:
        sock.bind(("", 0))
        port: int = sock.getsockname()[1]
        return port


def get(port: int, path: str) -> tuple[int, str]:
    """Status code and body of `GET path`; an error status is an answer, not an exception.
    Waits a little for the port to open: a daemon thread just started may not have bound it."""
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except urllib.error.URLError as error:
            if not isinstance(error.reason, ConnectionRefusedError):
                raise
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


def scrape(port: int) -> Series:
    """Every sample of /metrics, parsed by Prometheus's own text parser, by name and labels."""
    status, text = get(port, "/metrics")
    assert status == 200, text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, tuple(sorted(labels.items()))))
