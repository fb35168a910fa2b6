"""Who is looking at a page: the session cookie, whether a token signed it in (and as a
reader or an operator), and the CSRF token its forms carry. Set on every request by
VisitorMiddleware."""

import re
from typing import NamedTuple

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from outbox_console.sessions import Sessions, new_session_id
from outbox_console.tokens import OPERATOR

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
    """The name of the token this session signed in with; None: nobody signed in."""
    role: str | None
    """The token's role (tokens.READER or tokens.OPERATOR); None: nobody signed in."""
    csrf_token: str

    @property
    def reads_messages(self) -> bool:
        """May see messages and the SQL of blocking sessions: any token signed it in."""
        return self.role is not None

    @property
    def acts(self) -> bool:
        return self.role == OPERATOR


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
        # Read before routing: a Mount (/static) extends the scope's root_path as it routes.
        cookie_path = scope.get("root_path", "") or "/"
        secure = request.url.scheme == "https"
        offered = request.cookies.get(COOKIE)
        fresh = offered is None or not _SESSION_ID.fullmatch(offered)
        session_id = new_session_id() if fresh or offered is None else offered
        signed_in = self.sessions.signed_in(session_id)
        request.state.visitor = Visitor(
            session_id,
            None if signed_in is None else signed_in.holder,
            None if signed_in is None else signed_in.role,
            self.sessions.csrf_token(session_id),
        )
        request.state.new_session_id = session_id if fresh else None

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
                replaced = request.state.new_session_id
                if replaced is not None:
                    headers.append("set-cookie", _cookie(replaced, cookie_path, secure))
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _cookie(session_id: str, path: str, secure: bool) -> str:
    flag = "; Secure" if secure else ""
    return f"{COOKIE}={session_id}; Path={path}; HttpOnly; SameSite=Strict{flag}"
