"""The values a page reads from its query: names, and a place in delivery order.

PostgreSQL text cannot hold a NUL character, so a name with one names nothing, and sending it
would fail in the driver rather than in a check: it is refused here, as a bad value (400).
"""

from starlette.exceptions import HTTPException
from starlette.requests import Request

from outbox.positions import Position
from poller.operations import quoted


def refuse_nul(value: str, parameter: str) -> None:
    if "\x00" in value:
        raise HTTPException(
            400, f"{parameter} {quoted(value)} holds a NUL character, which no name can"
        )


def name_parameter(request: Request, parameter: str = "name") -> str:
    value = request.query_params.get(parameter)
    if not value:
        raise HTTPException(400, f"name a {parameter} (?{parameter}=...)")
    refuse_nul(value, parameter)
    return value


def place_parameter(request: Request, parameter: str) -> Position | None:
    """TX:POS, or None when the query does not give one."""
    value = request.query_params.get(parameter)
    if not value:
        return None
    try:
        return Position.parse(value)
    except ValueError:
        raise HTTPException(400, f"{parameter} {quoted(value)} is not TX:POS") from None
