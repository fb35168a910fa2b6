"""The alert rules (deploy/prometheus/outbox-alerts.yml) as Prometheus's own tool reads them:
`promtool check rules` and `promtool test rules` with the unit tests beside them."""

import re
import subprocess

from tests.support.prometheus import RULE_TESTS, RULES, tool


def promtool(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *arguments],
        capture_output=True,
        text=True,
        cwd=RULES.parent,
        timeout=60,
        check=False,
    )


def alert_names() -> list[str]:
    return re.findall(r"^      - alert: (\w+)$", RULES.read_text(), re.MULTILINE)


def test_promtool_checks_every_rule() -> None:
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_promtool_unit_tests_pass() -> None:
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = RULE_TESTS.read_text()
    checks = re.findall(r"alertname: (\w+)\n\s+exp_alerts:( \[\])?", tests)
    firing = {name for name, none in checks if not none}
    quiet = {name for name, none in checks if none}
    names = set(alert_names())
    assert len(names) >= 10
    assert names - firing == set(), "alerts never seen firing"
    assert names - quiet == set(), "alerts never seen staying quiet"


def test_every_alert_has_a_summary_and_a_runbook_that_says_what_to_do() -> None:
    rules = RULES.read_text()
    blocks = re.split(r"^      - alert: ", rules, flags=re.MULTILINE)[1:]
    assert len(blocks) == len(alert_names())
    for block in blocks:
        name = block.split("\n", 1)[0]
        assert "summary:" in block, name
        runbook = block.split("runbook: |", 1)[-1]
        for part in ("What it means:", "Confirm:", "What to do:"):
            assert part in runbook, f"{name}: its runbook lacks {part!r}"
