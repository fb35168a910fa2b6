"""Who is looking at a page: the session cookie, whether a token signed it in, and the CSRF
token its forms carry. Set on every request by VisitorMiddleware."""

import re
from typing import NamedTuple

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox_console.sessions import Sessions, new_session_id

COOKIE = "outbox_console_session"
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")

# Scripts and styles come from the console alone; no page may be framed (clickjacking an
# action's button), and forms post only to the console.
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


class Visitor(NamedTuple):
    session_id: str
    holder: str | None
    """The name of the token this session signed in with; None: read-only."""
    csrf_token: str


def client_text(request: Request) -> str:
    return request.client.host if request.client else "unknown"


class VisitorMiddleware:
    """Gives every request a Visitor (request.state.visitor) and every response the session
    cookie (a new one where the browser had none, or where signing in or out replaced it:
    request.state.new_session_id) and the security headers."""

    def __init__(self, app: ASGIApp, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        offered = request.cookies.get(COOKIE)
        fresh = offered is None or not _SESSION_ID.fullmatch(offered)
        session_id = new_session_id() if fresh or offered is None else offered
        request.state.visitor = Visitor(
            session_id, self.sessions.holder(session_id), self.sessions.csrf_token(session_id)
        )
        request.state.new_session_id = session_id if fresh else None

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                replaced = request.state.new_session_id
                if replaced is not None:
                    headers.append("set-cookie", _cookie(request, replaced))
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _cookie(request: Request, session_id: str) -> str:
    path = request.scope.get("root_path", "") or "/"
    secure = "; Secure" if request.url.scheme == "https" else ""
    return f"{COOKIE}={session_id}; Path={path}; HttpOnly; SameSite=Strict{secure}"
