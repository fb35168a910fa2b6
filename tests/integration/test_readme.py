"""The documentation's Python snippets (the README's, then the site's pages in the order of its
nav) run, in order, against a fresh database."""

import re

import pytest

from tests.support import documentation


def test_the_readme_snippets_run(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = documentation.text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    # The tour's application reads the URL as every `outbox` command does.
    monkeypatch.setenv("OUTBOX_DATABASE_URL", database_url)
    namespace = {"DATABASE_URL": database_url, "SQLALCHEMY_URL": sqlalchemy_url(database_url)}
    for block in blocks:
        exec(compile(block, "documentation", "exec"), namespace)
    import psycopg

    with psycopg.connect(database_url) as conn:
        types = conn.execute(
            "SELECT message_type FROM outbox.messages WHERE publication_id = 'orders'"
            " ORDER BY position"
        ).fetchall()
        delivered = conn.execute(
            "SELECT count(*) FROM outbox.messages AS m JOIN outbox.subscriptions AS s"
            " ON s.publication_id = m.publication_id"
            " AND (m.transaction_id, m.position)"
            " <= (s.last_processed_transaction_id, s.last_processed_position)"
            " WHERE s.subscription_id = 'invoicing'"
        ).fetchone()
    # The quickstart's messages, after the tour's (when the README has one).
    assert types[-3:] == [("OrderPlaced",), ("OrderChanged",), ("InvoiceDue",)]
    if "DaemonThread(" in text:
        # The daemon run inside the application delivered its message and checkpointed it.
        assert delivered == (1,)


def sqlalchemy_url(conninfo: str) -> str:
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.engine import URL

    parts = conninfo_to_dict(conninfo)
    return URL.create(
        "postgresql+psycopg",
        username=str(parts.get("user", "postgres")),
        password=str(parts["password"]) if parts.get("password") else None,
        host=None if str(parts.get("host", "")).startswith("/") else str(parts.get("host") or ""),
        port=int(str(parts["port"])) if parts.get("port") else None,
        database=str(parts["dbname"]),
        query={"host": str(parts["host"])} if str(parts.get("host", "")).startswith("/") else {},
    ).render_as_string(hide_password=False)
