"""The console as an ASGI application (Starlette): its routes, the errors they show, and the
sampler that runs beside them."""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from outbox.database_url import mask_password
from outbox_console import action_pages, reading_pages
from outbox_console.config import ConsoleConfig
from outbox_console.confirmations import Confirmations
from outbox_console.history import History
from outbox_console.hosts import HostCheck
from outbox_console.proposals import Proposal
from outbox_console.rendering import PACKAGE, page
from outbox_console.sampler import Sampler
from outbox_console.sessions import Sessions
from outbox_console.throttle import SignInThrottle
from outbox_console.visitors import VisitorMiddleware
from poller.operations import NotFoundError, RefusedValueError, SubscriptionError

log = logging.getLogger(__name__)


def _refused_value(request: Request, error: Exception) -> Response:
    return page(request, "refused.html", 400, reason=str(error))


def _subscription_error(request: Request, error: Exception) -> Response:
    return page(request, "refused.html", 409, reason=str(error))


def _not_found(request: Request, error: Exception) -> Response:
    return page(request, "refused.html", 404, reason=str(error))


def _database_error(request: Request, error: Exception) -> Response:
    reason = mask_password(str(error).strip().splitlines()[0] if str(error).strip() else "")
    log.warning("a console page failed on the database: %s", reason)
    return page(request, "refused.html", 503, reason=f"database error: {reason}")


def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    return page(request, "refused.html", error.status_code, reason=error.detail)


def _unexpected(request: Request, error: Exception) -> Response:
    # Starlette raises it on after this page is sent, and uvicorn logs it with its traceback.
    reason = mask_password(f"unexpected {type(error).__name__}: {error}")
    return page(request, "refused.html", 500, reason=reason)


def create_app(config: ConsoleConfig) -> Starlette:
    history = History(config.history_seconds, config.sample_interval)
    sampler = Sampler(
        config.database_url, config.sample_interval, history, read_url=config.read_database_url
    )
    sessions = Sessions()
    middleware = [
        Middleware(HostCheck, allowed=config.allowed_hosts),
        Middleware(VisitorMiddleware, sessions=sessions),
    ]
    if config.forwarded_allow_ips:
        # Outermost: the Host check, the session cookie's Secure flag and the action log see
        # the browser's address and scheme, as the configured proxies forward them.
        trusted = list(config.forwarded_allow_ips)
        middleware.insert(0, Middleware(ProxyHeadersMiddleware, trusted_hosts=trusted))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        sampling = asyncio.create_task(sampler.run(stop))
        try:
            yield
        finally:
            stop.set()
            await sampling

    app = Starlette(
        routes=[
            Route("/", reading_pages.overview),
            Route("/live", reading_pages.overview_live),
            Route("/subscription", reading_pages.subscription),
            Route("/parked", reading_pages.parked_list),
            Route("/parked/message", reading_pages.parked_message),
            Route("/tail", reading_pages.tail),
            Route("/tail/live", reading_pages.tail_live),
            Route("/confirm", action_pages.confirm),
            Route("/act", action_pages.act, methods=["POST"]),
            Route("/sign-in", action_pages.sign_in_form),
            Route("/sign-in", action_pages.sign_in, methods=["POST"]),
            Route("/sign-out", action_pages.sign_out, methods=["POST"]),
            Mount("/static", StaticFiles(directory=PACKAGE / "static"), name="static"),
        ],
        middleware=middleware,
        exception_handlers={
            RefusedValueError: _refused_value,
            NotFoundError: _not_found,
            SubscriptionError: _subscription_error,
            psycopg.Error: _database_error,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
        lifespan=lifespan,
    )
    app.state.config = config
    app.state.sampler = sampler
    app.state.sessions = sessions
    app.state.confirmations = Confirmations[Proposal]()
    app.state.throttle = SignInThrottle()
    return app
