"""The names the console answers to, and the check of every request's Host header.

A web page anywhere can make a browser ask a name of its own that it then points at
127.0.0.1 (DNS rebinding): to the browser that is the page's own origin, so it may read the
answers, and only the Host header still says which name was asked for. So the console answers
only to the names it was bound to or told (`--allowed-host`, the name a reverse proxy passes
on), and to localhost, 127.0.0.1 and ::1 when it listens there.
"""

import ipaddress
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from poller.operations import quoted

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_EVERY_ADDRESS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine alone."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve to any address


def host_name(value: str) -> str:
    """A Host header's (or an option's) name without its port, lower case, IPv6 unbracketed."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        return name
    return value


def allowed_hosts(bound: str, named: Iterable[str] = ()) -> frozenset[str]:
    """The names a console bound to `bound` answers to: those `named`, the bound address
    (unless it is every address), and the loopback names when it listens on them."""
    hosts = {host_name(name) for name in named}
    if bound not in _EVERY_ADDRESS:
        hosts.add(host_name(bound))
    if bound in _EVERY_ADDRESS or is_loopback(bound):
        hosts.update(LOOPBACK_NAMES)
    return frozenset(hosts)


class HostCheck:
    """Answers 400 to a request whose Host is not one of `allowed`, before anything else."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = Headers(scope=scope).get("host", "")
        if host_name(offered) in self.allowed:
            await self.app(scope, receive, send)
            return
        refusal = PlainTextResponse(
            f"this console does not answer to the host {quoted(offered)}; a name it should"
            " answer to is given with `outbox console --allowed-host NAME`\n",
            status_code=400,
            headers={"cache-control": "no-store", "x-content-type-options": "nosniff"},
        )
        await refusal(scope, receive, send)
