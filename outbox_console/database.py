"""One connection per request, as an `outbox` command opens one: its statements commit
together when the page's work is done, or roll back when it fails, so nothing is half-done."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from starlette.requests import Request

APPLICATION_NAME = "outbox-console"


@contextmanager
def connection(request: Request) -> Iterator[psycopg.Connection[Any]]:
    url: str = request.app.state.config.database_url
    with psycopg.connect(url, application_name=APPLICATION_NAME) as conn:
        yield conn
