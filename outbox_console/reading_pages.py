"""The pages that read: the overview (and its live part), a subscription, its parked messages,
a publication's tail. Messages (payloads, headers, parked errors) and the SQL of sessions that
hold delivery back are shown only to a browser a token signed in, and only as much of a
message as a page shows is read from the database."""

import functools
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse

from outbox.positions import START, Position
from outbox_console.charts import line_chart
from outbox_console.database import connection
from outbox_console.history import History
from outbox_console.parameters import name_parameter, place_parameter
from outbox_console.rendering import page
from outbox_console.sampler import Overview, Sampler
from outbox_console.visitors import Visitor
from poller import operations
from poller.operations import Blocker

TAIL_LENGTH = 50
# Characters of a payload the tail shows; a parked message's page shows up to PAGE_CHARACTERS
# of its payload and of its headers, and says how long they are.
TAIL_CHARACTERS = 200
PAGE_CHARACTERS = 65_536
PARKED_PAGE_LENGTH = 100
# An overview sample older than this many intervals (plus STALE_MARGIN_SECONDS for a slow
# reading) says how old it is: the database stopped answering the sampler.
STALE_INTERVALS = 2
STALE_MARGIN_SECONDS = 2.0


def _sampler(request: Request) -> Sampler:
    sampler: Sampler = request.app.state.sampler
    return sampler


def _charts(history: History, name: str) -> dict[str, Any]:
    """The subscription's two charts, from its first point kept (at most the history's span
    ago) to now, so a young console's few minutes fill the width."""
    now = time.time()
    points = history.points(name, now)
    start = max(now - history.keep_seconds, points[0].at if points else now) - 1e-3
    return {
        "behind": line_chart([(p.at, p.behind) for p in points], start, now),
        "rate": line_chart([(p.at, p.rate) for p in points], start, now),
        "span": span_text(now - start),
    }


def span_text(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes >= 60:
        return "the last hour"
    return "the last minute" if minutes <= 1 else f"the last {minutes} minutes"


def _overview_context(request: Request) -> dict[str, Any]:
    sampler = _sampler(request)
    overview: Overview | None = sampler.latest
    charts = {}
    age = None
    if overview is not None:
        charts = {
            row.subscription: _charts(sampler.history, row.subscription)
            for row in overview.statuses
        }
        age = time.time() - overview.taken_at.timestamp()
    stale = age is not None and age > STALE_INTERVALS * sampler.interval + STALE_MARGIN_SECONDS
    visitor: Visitor = request.state.visitor
    return {
        "overview": overview,
        "failure": sampler.failure,
        "stale_seconds": age if stale else None,
        "charts": charts,
        "interval": sampler.interval,
        "history_minutes": sampler.history.keep_seconds / 60,
        "query_of": functools.partial(_blocker_query, visitor, overview),
    }


def _blocker_query(visitor: Visitor, overview: Overview | None, blocker: Blocker) -> str | None:
    """The start of a blocking session's SQL, for a signed-in visitor, and only for a session
    in this database: the others' belong to whoever else uses the server."""
    if not visitor.reads_messages or overview is None:
        return None
    if blocker.database != overview.privileges.database:
        return None
    return blocker.query_start


def overview(request: Request) -> HTMLResponse:
    return page(request, "overview.html", **_overview_context(request))


def overview_live(request: Request) -> HTMLResponse:
    """The overview's changing part, which the page fetches again every interval."""
    return page(request, "overview_live.html", **_overview_context(request))


def _sign_in_to_read(request: Request) -> HTMLResponse | None:
    """The page that says to sign in, for a visitor no token signed in; else None."""
    if request.state.visitor.reads_messages:
        return None
    return page(request, "sign_in_to_read.html", 403)


def subscription(request: Request) -> HTMLResponse:
    name = name_parameter(request)
    with connection(request) as conn:
        record = operations.get(conn, name)
        shards = operations.shards(conn, name)
        runtime = operations.runtime(conn, name)
        skip = operations.skip_request(conn, name)
        privileges = operations.privileges(conn)
    latest = _sampler(request).latest
    status = (
        None
        if latest is None
        else next((row for row in latest.statuses if row.subscription == name), None)
    )
    rate = None if latest is None else latest.rates.get(name)
    return page(
        request,
        "subscription.html",
        record=record,
        shards=shards,
        runtime=runtime,
        skip=skip,
        status=status,
        rate=rate,
        privileges=privileges,
        history=_charts(_sampler(request).history, name),
    )


def parked_list(request: Request) -> HTMLResponse:
    """A page of PARKED_PAGE_LENGTH parked messages, after `after` (TX:POS) in delivery order,
    under the count of them all."""
    name = name_parameter(request)
    after = place_parameter(request, "after")
    if (refused := _sign_in_to_read(request)) is not None:
        return refused
    with connection(request) as conn:
        record = operations.get(conn, name)
        privileges = operations.privileges(conn)
        rows, total = [], 0
        if privileges.reads_messages:
            rows = operations.list_parked(conn, name, PARKED_PAGE_LENGTH + 1, after or START)
            total = operations.parked_count(conn, name)
    # One row more than a page was read: whether a next page starts after this one's last.
    shown = rows[:PARKED_PAGE_LENGTH]
    following = None
    if len(rows) > PARKED_PAGE_LENGTH:
        following = Position(shown[-1].transaction_id, shown[-1].position)
    return page(
        request,
        "parked_list.html",
        record=record,
        rows=shown,
        total=total,
        after=after,
        following=following,
        privileges=privileges,
    )


def parked_message(request: Request) -> HTMLResponse:
    name = name_parameter(request)
    at = name_parameter(request, "at")
    if (refused := _sign_in_to_read(request)) is not None:
        return refused
    with connection(request) as conn:
        privileges = operations.privileges(conn)
        if not privileges.reads_messages:
            return page(request, "no_messages.html", 403, privileges=privileges)
        found = operations.parked_message_excerpt(conn, name, at, PAGE_CHARACTERS)
    return page(request, "parked_message.html", name=name, parked=found, privileges=privileges)


def _tail_context(request: Request) -> dict[str, Any]:
    publication = name_parameter(request, "publication")
    with connection(request) as conn:
        privileges = operations.privileges(conn)
        messages = (
            operations.latest_messages(conn, publication, TAIL_LENGTH, TAIL_CHARACTERS)
            if privileges.reads_messages
            else []
        )
    return {"publication": publication, "messages": messages, "privileges": privileges}


def tail(request: Request) -> HTMLResponse:
    if (refused := _sign_in_to_read(request)) is not None:
        return refused
    context = _tail_context(request)
    if not context["privileges"].reads_messages:
        return page(request, "no_messages.html", 403, privileges=context["privileges"])
    return page(request, "tail.html", interval=_sampler(request).interval, **context)


def tail_live(request: Request) -> HTMLResponse:
    if (refused := _sign_in_to_read(request)) is not None:
        return refused
    context = _tail_context(request)
    if not context["privileges"].reads_messages:
        return page(request, "no_messages.html", 403, privileges=context["privileges"])
    return page(request, "tail_live.html", **context)
