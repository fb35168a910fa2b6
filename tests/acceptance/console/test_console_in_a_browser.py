"""The console in a real browser (headless Chromium), against a real PostgreSQL and a running
`outbox poll`: what an operator sees and does, and what the daemon then delivers.

One database, one daemon and one console serve the module; each test has subscriptions of
its own. OUTBOX_CONSOLE_SCREENSHOTS=DIR saves the pages the docs show (docs/console/) into DIR.
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

import outbox
from outbox.positions import Position
from tests.support.console_server import TOKEN, ConsoleServer, console_server
from tests.support.daemons import DaemonGroup, create_handled_table, daemon_group, wait_until
from tests.support.databases import DatabaseFactory, probe
from tests.support.stored import create_subscription, stored_checkpoint

HANDLER = "tests.support.console_handler:record_unless_refused"
# Parked at the first failure, retried and checkpointed at once: the tests wait on conditions.
QUICK = {
    "max_retry_count": 1,
    "retry_backoff_initial": 0.01,
    "checkpoint_after": 0.1,
    "min_checkpoint_count": 1,
}
WAIT = 30
# As long as a name may be (outbox.names.MAX_NAME_LENGTH), with no space to break it at.
LONG_NAME = "long-" + "x" * 195


@dataclass
class Deployment:
    url: str
    console: ConsoleServer
    daemons: DaemonGroup


@pytest.fixture(scope="module")
def deployment(
    database_factory: DatabaseFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    url = database_factory.create()
    logs = tmp_path_factory.mktemp("console")
    create_handled_table(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE refused_types (message_type text PRIMARY KEY)")
    for name, publication in (
        ("parking", "orders"),
        ("seeking", "events"),
        ("skipping", "payments"),
        ("idle", "quiet"),
    ):
        create_subscription(url, name, publication, **QUICK)
    try:
        with (
            daemon_group(url, logs) as daemons,
            console_server(url, logs / "console.log", "--sample-interval", "0.5") as console,
        ):
            daemons.start(
                "parking", "--subscription", "seeking", "--lease-seconds", "2", handler=HANDLER
            )
            yield Deployment(url, console, daemons)
    finally:
        database_factory.drop(url)


@pytest.fixture
def page(browser: WebDriver, deployment: Deployment) -> WebDriver:
    """The shared browser, signed out (cookies are per host, so per test they go)."""
    browser.get(deployment.console.url("/static/console.css"))
    browser.delete_all_cookies()
    return browser


# The database side ------------------------------------------------------------------------


def append(url: str, publication: str, message_type: str, data: Any, **options: Any) -> Position:
    with psycopg.connect(url) as conn:
        position = outbox.append(conn, publication, message_type, data, **options)
    row = probe(url).execute(
        "SELECT transaction_id::text::bigint FROM outbox.messages WHERE position = %s", [position]
    )
    found = row.fetchone()
    assert found is not None
    return Position(found[0], position)


def refuse(url: str, message_type: str) -> None:
    probe(url).execute("INSERT INTO refused_types VALUES (%s)", [message_type])


def allow(url: str, message_type: str) -> None:
    probe(url).execute("DELETE FROM refused_types WHERE message_type = %s", [message_type])


def parked_positions(url: str, subscription: str) -> set[int]:
    rows = probe(url).execute(
        "SELECT position FROM outbox.parked_messages WHERE subscription_id = %s", [subscription]
    )
    return {row[0] for row in rows}


def times_handled(url: str, at: Position) -> int:
    row = probe(url).execute("SELECT count(*) FROM handled WHERE position = %s", [at.position])
    found = row.fetchone()
    assert found is not None
    return int(found[0])


# The browser side -------------------------------------------------------------------------


def text(browser: WebDriver, css: str) -> str:
    return str(browser.find_element(By.CSS_SELECTOR, css).text)


def wait_for_text(browser: WebDriver, css: str, expected: str) -> str:
    def shown(_: WebDriver) -> str | None:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found and expected in found[0].text else None

    try:
        # A page being replaced (a form just submitted) leaves stale elements: look again.
        waiting = WebDriverWait(
            browser, WAIT, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
        )
        return str(waiting.until(shown))
    except Exception:
        raise AssertionError(
            f"{css!r} never showed {expected!r}; the page says:\n{text(browser, 'main')}"
        ) from None


def sign_in(browser: WebDriver, console: ConsoleServer) -> None:
    browser.get(console.url("/sign-in"))
    browser.find_element(By.ID, "token").send_keys(TOKEN + Keys.ENTER)
    wait_for_text(browser, "header", "Signed in as token")


def tab_to(browser: WebDriver, element_id: str, most: int = 80) -> None:
    """Press Tab from the top of the page until `element_id` has the keyboard focus."""
    browser.execute_script("document.activeElement && document.activeElement.blur()")
    for _ in range(most):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element.get_attribute("id") == element_id:
            return
    raise AssertionError(f"#{element_id} never got the focus in {most} presses of Tab")


def press_enter(browser: WebDriver) -> None:
    ActionChains(browser).send_keys(Keys.ENTER).perform()


def screenshot(browser: WebDriver, name: str) -> None:
    """The whole page as DIR/NAME.png, when OUTBOX_CONSOLE_SCREENSHOTS=DIR asks for it."""
    folder = os.environ.get("OUTBOX_CONSOLE_SCREENSHOTS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, max(600, min(int(height) + 40, 3000)))
    try:
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))
    finally:
        browser.set_window_size(1280, 1000)


# The tests --------------------------------------------------------------------------------


def test_a_parked_message_shows_its_error_and_replaying_it_delivers_it(
    deployment: Deployment, page: WebDriver
) -> None:
    url, console = deployment.url, deployment.console
    refuse(url, "PaymentRefused")
    at = append(url, "orders", "PaymentRefused", {"order": 7}, headers={"tenant": "acme"})
    wait_until(lambda: at.position in parked_positions(url, "parking"), WAIT, "the park")
    sign_in(page, console)

    page.get(console.url("/"))
    parked = 'tr[data-subscription="parking"] td.parked a'
    WebDriverWait(page, WAIT).until(lambda b: b.find_elements(By.CSS_SELECTOR, parked))
    page.find_element(By.CSS_SELECTOR, parked).click()
    wait_for_text(page, "#parked", "refused by the test: PaymentRefused")
    page.find_element(By.LINK_TEXT, str(at)).click()
    assert "RuntimeError: refused by the test: PaymentRefused" in text(page, "#error")
    assert '"order": 7' in text(page, "#payload")
    assert '"tenant": "acme"' in text(page, "#headers")
    screenshot(page, "parked-message")

    allow(url, "PaymentRefused")
    tab_to(page, "replay-button")  # by keyboard alone, as an operator without a mouse would
    press_enter(page)
    wait_for_text(page, "#consequences", "1 message will be delivered again")
    screenshot(page, "confirm-replay")
    assert times_handled(url, at) == 0, "nothing happens before the confirmation"
    tab_to(page, "confirm-button")
    press_enter(page)
    wait_for_text(page, "#outcome", "replay of 1 message requested")

    wait_until(lambda: times_handled(url, at) == 1, WAIT, "the handler to record the replay")
    wait_until(lambda: at.position not in parked_positions(url, "parking"), WAIT, "unparking")
    assert "console action by token: replay 'parking'" in console.log()

    # Back to the confirmation (the browser's own copy) and confirm again: nothing happens.
    page.back()
    wait_for_text(page, "#consequences", "1 message will be delivered again")
    page.find_element(By.ID, "confirm-button").click()
    wait_for_text(page, "#reason", "no confirmation stands behind this form")


def test_seek_and_skip_change_what_the_daemon_delivers(
    deployment: Deployment, page: WebDriver
) -> None:
    url, console = deployment.url, deployment.console
    events = [
        append(url, "events", "Happened", {"n": n}, message_id=f"event-{n}") for n in range(3)
    ]
    wait_until(lambda: stored_checkpoint(url, "seeking") >= events[-1], WAIT, "the checkpoint")
    assert [times_handled(url, at) for at in events] == [1, 1, 1]
    sign_in(page, console)

    page.get(console.url("/subscription?name=seeking"))
    page.find_element(By.ID, "seek-to_message").send_keys("event-1")
    page.find_element(By.ID, "seek-to_message-button").click()
    wait_for_text(page, "#consequences", "2 messages will be delivered again")
    assert "0 messages will be passed over" in text(page, "#consequences")
    screenshot(page, "confirm-seek")
    page.find_element(By.ID, "confirm-button").click()
    wait_for_text(page, "#outcome", "now after")
    wait_until(
        lambda: [times_handled(url, at) for at in events] == [1, 2, 2],
        WAIT,
        "the seek's messages delivered again, and only them",
    )

    # No daemon leads `skipping` yet: the skip waits for the next leader, which applies it
    # before its first read.
    payments = [append(url, "payments", "Due", {"n": n}) for n in range(4)]
    page.get(console.url("/subscription?name=skipping"))
    page.find_element(By.ID, "skip-to").send_keys(str(payments[1]))
    page.find_element(By.ID, "skip-to-button").click()
    wait_for_text(page, "#consequences", "At most 2 messages after the stored checkpoint")
    page.find_element(By.ID, "confirm-button").click()
    wait_for_text(page, "#outcome", "skip to")
    deployment.daemons.start("skipping", "--lease-seconds", "2", handler=HANDLER)
    wait_until(lambda: stored_checkpoint(url, "skipping") >= payments[-1], WAIT, "the drain")
    assert [times_handled(url, at) for at in payments] == [0, 0, 1, 1]


def test_actions_without_the_token_or_the_csrf_token_are_refused_and_change_nothing(
    deployment: Deployment, page: WebDriver
) -> None:
    url, console = deployment.url, deployment.console
    refuse(url, "Poison")
    at = append(url, "orders", "Poison", {"order": 8})
    wait_until(lambda: at.position in parked_positions(url, "parking"), WAIT, "the park")
    purge = f"/confirm?action=purge&name=parking&at={at}"

    page.get(console.url(purge))
    wait_for_text(page, "#consequences", "1 message will be dropped for good")
    assert not page.find_elements(By.ID, "confirm-button"), "offered without a token"
    # A form forged in the page: the sign-in form's CSRF token is a real one, for a session
    # no token signed in.
    page.get(console.url("/sign-in"))
    page.execute_script(
        """
        const form = document.createElement("form");
        form.method = "post";
        form.action = "/act";
        const fields = {action: "purge", name: "parking", at: arguments[0],
                        csrf: document.querySelector("input[name=csrf]").value};
        for (const [name, value] of Object.entries(fields)) {
          const input = document.createElement("input");
          input.type = "hidden"; input.name = name; input.value = value;
          form.appendChild(input);
        }
        document.body.appendChild(form);
        form.submit();
        """,
        str(at),
    )
    wait_for_text(page, "#reason", "nobody is signed in: actions need a token")

    sign_in(page, console)
    page.get(console.url(purge))
    page.execute_script("document.querySelector('#confirm-form input[name=csrf]').remove()")
    page.find_element(By.ID, "confirm-button").click()
    wait_for_text(page, "#reason", "no valid CSRF token")

    assert at.position in parked_positions(url, "parking"), "a refused purge purged"
    refusals = [line for line in console.log().splitlines() if "action refused: purge" in line]
    assert len(refusals) == 2, console.log()
    assert TOKEN not in console.log()


def test_the_live_overview_updates_when_a_writer_appends(
    deployment: Deployment, page: WebDriver
) -> None:
    url, console = deployment.url, deployment.console
    page.get(console.url("/"))
    behind = 'tr[data-subscription="idle"] td.behind'
    WebDriverWait(page, WAIT).until(lambda b: b.find_elements(By.CSS_SELECTOR, behind))
    before = int(text(page, behind))
    page.execute_script("window.stillThisPage = true")

    append(url, "quiet", "Whisper", {"n": 1})
    append(url, "quiet", "Whisper", {"n": 2})
    wait_for_text(page, behind, str(before + 2))
    assert page.execute_script("return window.stillThisPage === true"), "the page reloaded"
    screenshot(page, "overview")


def test_every_input_has_a_label_and_a_form_works_from_the_keyboard(
    deployment: Deployment, page: WebDriver
) -> None:
    console = deployment.console
    unlabelled = """
        return Array.from(document.querySelectorAll(
            "input:not([type=hidden]), select, textarea, button"))
          .filter(e => e.tagName === "BUTTON" ? !e.textContent.trim() : e.labels.length === 0)
          .map(e => e.outerHTML)"""
    page.get(console.url("/sign-in"))
    assert page.execute_script(unlabelled) == []
    sign_in(page, console)
    for path in ("/subscription?name=seeking", "/parked?name=parking", "/"):
        page.get(console.url(path))
        assert page.execute_script(unlabelled) == [], path
    page.get(console.url("/subscription?name=seeking"))
    screenshot(page, "subscription")
    tab_to(page, "seek-to")
    ActionChains(page).send_keys("start" + Keys.ENTER).perform()
    wait_for_text(page, "h1", "Seek seeking to after 0:0")
    tab_to(page, "confirm-button")
    assert page.switch_to.active_element.text.startswith("Seek:")


def test_a_name_as_long_as_names_go_keeps_the_figures_on_screen(
    deployment: Deployment, page: WebDriver
) -> None:
    console = deployment.console
    create_subscription(deployment.url, LONG_NAME, LONG_NAME)
    sign_in(page, console)
    overflowing = """
        const width = document.documentElement.clientWidth;
        return Array.from(document.querySelectorAll(arguments[0]))
          .filter(e => e.getBoundingClientRect().right > width + 1)
          .map(e => e.tagName + "." + e.className + ": " + e.textContent.slice(0, 40))"""
    page.get(console.url("/"))
    row = f'tr[data-subscription="{LONG_NAME}"]'
    WebDriverWait(page, WAIT).until(lambda b: b.find_elements(By.CSS_SELECTOR, row))
    assert page.execute_script(overflowing, f"{row} td, {row} th, .card, h1, h2, p") == []
    pages = (f"/subscription?name={LONG_NAME}", f"/confirm?action=seek&name={LONG_NAME}&to=start")
    for path in pages:
        page.get(console.url(path))
        assert page.execute_script(overflowing, "main *") == [], path
