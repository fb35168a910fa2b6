"""Pages from Jinja2 templates (autoescaped: every name, payload and error is text), with
links under the path prefix a reverse proxy serves the console at."""

import datetime
import functools
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse

from outbox.positions import Position, readable

PACKAGE = Path(__file__).parent
ENVIRONMENT = jinja2.Environment(
    loader=jinja2.FileSystemLoader(PACKAGE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def href(request: Request, path: str, **parameters: object) -> str:
    """`path` under the console's root path, with `parameters` (None left out) as a query."""
    query = urlencode({k: str(v) for k, v in parameters.items() if v is not None})
    root_path: str = request.scope.get("root_path", "")
    return root_path + path + (f"?{query}" if query else "")


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.1f}/s"


def place_text(place: Position | None) -> str:
    return "-" if place is None else readable(place)


def time_text(moment: datetime.datetime | None) -> str:
    return "-" if moment is None else moment.isoformat(sep=" ", timespec="seconds")


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def pretty_text(text: str) -> str:
    """JSON text indented, when it is whole; a cut start of one, as it is."""
    try:
        return json_text(json.loads(text))
    except ValueError:
        return text


ENVIRONMENT.filters.update(
    age=age_text,
    rate=rate_text,
    place=place_text,
    time=time_text,
    json=json_text,
    pretty=pretty_text,
)


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    visitor = request.state.visitor
    html = ENVIRONMENT.get_template(template).render(
        request=request,
        href=functools.partial(href, request),
        visitor=visitor,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)
