"""A real Prometheus for tests: Debian's `prometheus` binary (`make tools` installs it), a
config and data directory of the test's own, a free port, a 1 s scrape and evaluation
interval. Targets come and go through a file_sd file, so one server serves a whole test
session while daemons start and stop. Talked to over its HTTP API, as Grafana and
Alertmanager do."""

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemons import wait_until
from tests.support.databases import PROJECT_ROOT
from tests.support.metrics_scrape import free_port

RULES = PROJECT_ROOT / "deploy" / "prometheus" / "outbox-alerts.yml"
RULE_TESTS = PROJECT_ROOT / "deploy" / "prometheus" / "outbox-alerts.test.yml"
DASHBOARD = PROJECT_ROOT / "deploy" / "grafana" / "outbox-poller.json"
JOB = "outbox-poller"  # the job the rules' `up` alerts name

NOT_INSTALLED = (
    "{} is not installed: `make tools` installs Debian's prometheus package"
    " (as root: apt-get install --no-install-recommends prometheus)"
)


def tool(name: str) -> str:
    """The path of `promtool` or `prometheus`; skips the calling test, saying how to
    install it, where it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(NOT_INSTALLED.format(name))
    return path


def rules_for_a_short_test(rules: str) -> str:
    """The shipped rules with two alerts made to fire at once, so a test of a few seconds
    sees them: the blocked delivery's threshold of 120 s becomes 1 s (its series only exists
    once a transaction has blocked for 5 s) and both lose their `for`. Everything else,
    their expressions' labels and annotations included, is as shipped."""
    changes = [
        (") > 120\n        for: 1m\n", ") > 1\n        for: 0s\n"),
        (
            "expr: max by (relay) (outbox_relay_failing) == 1\n        for: 5m\n",
            "expr: max by (relay) (outbox_relay_failing) == 1\n        for: 0s\n",
        ),
    ]
    for shipped, quick in changes:
        assert rules.count(shipped) == 1, f"the rules no longer hold {shipped!r}"
        rules = rules.replace(shipped, quick)
    return rules


@dataclass
class PrometheusServer:
    process: "subprocess.Popen[bytes]"
    port: int
    targets_file: Path
    log_path: Path

    @classmethod
    @contextmanager
    def running(cls, directory: Path, rules: str) -> Iterator["PrometheusServer"]:
        binary = tool("prometheus")
        (directory / "outbox-alerts.yml").write_text(rules)
        targets_file = directory / "targets.json"
        targets_file.write_text("[]")
        config = directory / "prometheus.yml"
        config.write_text(
            json.dumps(  # JSON is YAML
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(directory / "outbox-alerts.yml")],
                    "scrape_configs": [
                        {
                            "job_name": JOB,
                            "scrape_timeout": "1s",
                            "file_sd_configs": [
                                {"files": [str(targets_file)], "refresh_interval": "1s"}
                            ],
                        }
                    ],
                }
            )
        )
        port = free_port()
        log_path = directory / "prometheus.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        server = cls(process, port, targets_file, log_path)
        try:
            wait_until(server.ready, 30, "Prometheus ready")
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"Prometheus exited:\n{self.log_path.read_text()}")
        try:
            with urllib.request.urlopen(self._url("/-/ready"), timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def scrape(self, ports: list[int]) -> None:
        """Scrape these metrics ports from now on (replaced whole, atomically: Prometheus
        reads the file as soon as it is renamed into place)."""
        staged = self.targets_file.with_suffix(".staged")
        staged.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports]}]))
        os.replace(staged, self.targets_file)

    def api(self, path: str, **parameters: str | list[str]) -> Any:
        """The `data` of a successful answer; a failed one (a query that does not parse)
        raises AssertionError with Prometheus's error."""
        query = urllib.parse.urlencode(parameters, doseq=True)
        try:
            with urllib.request.urlopen(self._url(f"{path}?{query}"), timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        if body.get("status") != "success":
            raise AssertionError(
                f"{path} {parameters}: {body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("/api/v1/query", query=expression)["result"]
        return result

    def value(self, expression: str) -> float | None:
        """The single value of an expression that yields at most one series."""
        result = self.query(expression)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def alerts(self, name: str) -> list[dict[str, Any]]:
        """The pending and firing alerts of that name."""
        alerts: list[dict[str, Any]] = self.api("/api/v1/alerts")["alerts"]
        return [alert for alert in alerts if alert["labels"]["alertname"] == name]

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


# What PromQL names -------------------------------------------------------------------------

_KEYWORDS = {"bool", "offset", "and", "or", "unless", "inf", "nan"}


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers but for functions and
    aggregations (followed by a parenthesis), keywords, label names (in selectors and in
    grouping clauses) and the text of strings and durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end() :].lstrip()
        if following.startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        if match.start() > 0 and text[match.start() - 1].isdigit():
            continue  # a number's exponent or unit, as in 1e3
        names.add(match.group())
    return names


def served_names(exposition: str) -> set[str]:
    """Every sample name a /metrics page can carry, from its TYPE lines: those of families
    with no sample now (a gauge of blocking transactions when none blocks) count too."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "counter" and not name.endswith("_total"):
            names.add(f"{name}_total")
        else:
            names.add(name)
    return names
