"""Signed-in sessions and CSRF tokens, kept in this process's memory.

Every browser gets a random session id in an HttpOnly, SameSite=Strict cookie; signing in with
a token gives it a new one (the old id, which a page may have leaked, is worth nothing) that
this process remembers with the token's name and role until it is idle for IDLE_SECONDS or
signs out.
A form's CSRF token is an HMAC of the session id under a key made at start, so it needs no
storage and is worthless in another browser. A restart forgets every session: operators sign
in again.
"""

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

IDLE_SECONDS = 8 * 3600
# Sessions are made only by a correct token, so this bounds what a leaked token can grow.
MAX_SESSIONS = 1000


class SignedIn(NamedTuple):
    holder: str
    """The name of the token the session signed in with."""
    role: str
    """The token's role (tokens.OPERATOR or tokens.READER)."""


class Session(NamedTuple):
    signed_in: SignedIn
    last_seen: float


def new_session_id() -> str:
    return secrets.token_urlsafe(32)


class Sessions:
    def __init__(
        self, idle_seconds: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._key = secrets.token_bytes(32)
        self._idle = idle_seconds
        self._clock = clock
        self._signed_in: OrderedDict[str, Session] = OrderedDict()

    def sign_in(self, holder: str, role: str) -> str:
        """A new session id for `holder`, signed in as `role`."""
        session_id = new_session_id()
        self._signed_in[session_id] = Session(SignedIn(holder, role), self._clock())
        while len(self._signed_in) > MAX_SESSIONS:
            self._signed_in.popitem(last=False)
        return session_id

    def signed_in(self, session_id: str | None) -> SignedIn | None:
        """Who signed in with this session id (None: nobody, or idle too long)."""
        if session_id is None:
            return None
        session = self._signed_in.get(session_id)
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > self._idle:
            del self._signed_in[session_id]
            return None
        self._signed_in[session_id] = Session(session.signed_in, now)
        self._signed_in.move_to_end(session_id)
        return session.signed_in

    def sign_out(self, session_id: str | None) -> None:
        if session_id is not None:
            self._signed_in.pop(session_id, None)

    def csrf_token(self, session_id: str) -> str:
        return hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    def csrf_valid(self, session_id: str | None, offered: str | None) -> bool:
        if not session_id or not offered:
            return False
        return hmac.compare_digest(self.csrf_token(session_id), offered)
