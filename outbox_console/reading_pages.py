"""The pages that read: the overview (and its live part), a subscription, its parked messages,
a publication's tail."""

import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse

from outbox_console.charts import line_chart
from outbox_console.database import connection
from outbox_console.history import History
from outbox_console.rendering import page
from outbox_console.sampler import Overview, Sampler
from poller import operations

TAIL_LENGTH = 50


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
    if overview is not None:
        charts = {
            row.subscription: _charts(sampler.history, row.subscription)
            for row in overview.statuses
        }
    return {
        "overview": overview,
        "failure": sampler.failure,
        "charts": charts,
        "interval": sampler.interval,
        "history_minutes": sampler.history.keep_seconds / 60,
    }


def overview(request: Request) -> HTMLResponse:
    return page(request, "overview.html", **_overview_context(request))


def overview_live(request: Request) -> HTMLResponse:
    """The overview's changing part, which the page fetches again every interval."""
    return page(request, "overview_live.html", **_overview_context(request))


def _name(request: Request, parameter: str = "name") -> str:
    value = request.query_params.get(parameter)
    if not value:
        raise HTTPException(400, f"name a {parameter} (?{parameter}=...)")
    return value


def subscription(request: Request) -> HTMLResponse:
    name = _name(request)
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
    name = _name(request)
    with connection(request) as conn:
        record = operations.get(conn, name)
        privileges = operations.privileges(conn)
        rows = operations.list_parked(conn, name, 1000) if privileges.reads_messages else []
    return page(request, "parked_list.html", record=record, rows=rows, privileges=privileges)


def parked_message(request: Request) -> HTMLResponse:
    name = _name(request)
    at = _name(request, "at")
    with connection(request) as conn:
        privileges = operations.privileges(conn)
        if not privileges.reads_messages:
            return page(request, "no_messages.html", 403, privileges=privileges)
        found = operations.parked_message(conn, name, at)
    return page(request, "parked_message.html", name=name, parked=found, privileges=privileges)


def _tail_context(request: Request) -> dict[str, Any]:
    publication = _name(request, "publication")
    with connection(request) as conn:
        privileges = operations.privileges(conn)
        messages = (
            operations.latest_messages(conn, publication, TAIL_LENGTH)
            if privileges.reads_messages
            else []
        )
    return {"publication": publication, "messages": messages, "privileges": privileges}


def tail(request: Request) -> HTMLResponse:
    context = _tail_context(request)
    if not context["privileges"].reads_messages:
        return page(request, "no_messages.html", 403, privileges=context["privileges"])
    return page(request, "tail.html", interval=_sampler(request).interval, **context)


def tail_live(request: Request) -> HTMLResponse:
    context = _tail_context(request)
    if not context["privileges"].reads_messages:
        return page(request, "no_messages.html", 403, privileges=context["privileges"])
    return page(request, "tail_live.html", **context)
