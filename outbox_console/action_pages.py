"""The pages that act: a confirmation that says what an action will change, the action itself
(a POST carrying the form's CSRF token, from a session a token signed in, on a database role
that may act), and signing in and out. Every action, taken or refused, is logged (audit.py).
"""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from outbox.positions import readable
from outbox_console import audit
from outbox_console.database import connection
from outbox_console.rendering import href, page
from outbox_console.sessions import Sessions, new_session_id
from outbox_console.tokens import Token, token_holder
from outbox_console.visitors import client_text
from poller import operations
from poller.operations import SubscriptionError, quoted

Form = Mapping[str, str]


class Proposal(NamedTuple):
    """An action as its confirmation page shows it."""

    action: str
    name: str
    title: str
    consequences: list[str]
    fields: dict[str, str]
    """What the confirmation's form posts (besides the CSRF token)."""
    button: str


class RefusedError(Exception):
    def __init__(self, reason: str, status_code: int) -> None:
        super().__init__(reason)
        self.status_code = status_code


def _messages(count: int) -> str:
    return "1 message" if count == 1 else f"{count} messages"


def _parked_target(conn: psycopg.Connection[Any], name: str, at: str | None) -> Any:
    return operations.parked_target(conn, name, at or None, None)


def _parked_what(target: object, count: int) -> str:
    if target is None:
        return "every parked message" if count != 1 else "the one parked message"
    return f"the parked message at {target}"


def propose_replay(conn: psycopg.Connection[Any], name: str, form: Form) -> Proposal:
    target = _parked_target(conn, name, form.get("at"))
    preview = operations.preview_parked(conn, name, target)
    if preview.messages == 0:
        raise SubscriptionError(f"{quoted(name)} has no parked messages to replay")
    return Proposal(
        "replay",
        name,
        f"Replay {_parked_what(target, preview.messages)} of {name}",
        [
            f"{_messages(preview.messages)} will be delivered again, ahead of new ones: by the"
            " leader of each message's shard at its next lease renewal, or first by the next"
            " leader when none leads now.",
            "The checkpoint does not move. A replay that fails parks its message again.",
        ],
        {"at": "" if target is None else str(target)},
        f"Replay {_messages(preview.messages)}",
    )


def propose_purge(conn: psycopg.Connection[Any], name: str, form: Form) -> Proposal:
    target = _parked_target(conn, name, form.get("at"))
    preview = operations.preview_parked(conn, name, target)
    if preview.messages == 0:
        raise SubscriptionError(f"{quoted(name)} has no parked messages to purge")
    return Proposal(
        "purge",
        name,
        f"Purge {_parked_what(target, preview.messages)} of {name}",
        [f"{_messages(preview.messages)} will be dropped for good: never delivered again."],
        {"at": "" if target is None else str(target)},
        f"Purge {_messages(preview.messages)}",
    )


def propose_skip(conn: psycopg.Connection[Any], name: str, form: Form) -> Proposal:
    preview = operations.preview_skip(conn, name, form.get("to") or "")
    return Proposal(
        "skip",
        name,
        f"Skip {name} to {readable(preview.to)}",
        [
            f"{_messages(preview.finished_undelivered)} after the checkpoint, up to"
            f" {readable(preview.to)}, will be finished without being delivered.",
            "The epoch stays: nothing after it is delivered twice. The leader applies the skip"
            " at its next lease renewal, or the next leader before it reads.",
        ],
        {"to": str(preview.to)},
        f"Skip {_messages(preview.finished_undelivered)}",
    )


def propose_seek(conn: psycopg.Connection[Any], name: str, form: Form) -> Proposal:
    given = {key: form.get(key) or None for key in ("to", "to_time", "to_message")}
    since = None if given["to_time"] is None else operations.parse_time(given["to_time"])
    preview = operations.preview_seek(
        conn, name, to=given["to"], since=since, message_id=given["to_message"]
    )
    consequences = [
        f"{_messages(preview.delivered_again)} will be delivered again (a checkpoint had"
        " passed them).",
        f"{_messages(preview.passed_over)} will be passed over: never delivered.",
        "Every shard moves; delivery resumes after this place, in a new epoch. Messages handled"
        " since the last stored checkpoint are delivered again, as after any restart.",
    ]
    if preview.voids_skip:
        consequences.append("The skip requested earlier ends: the seek starts a new epoch.")
    return Proposal(
        "seek",
        name,
        f"Seek {name} to after {readable(preview.to)}",
        consequences,
        {"to": str(preview.to)},
        f"Seek: {_messages(preview.delivered_again)} again, {preview.passed_over} passed over",
    )


def take_replay(conn: psycopg.Connection[Any], name: str, form: Form) -> str:
    target = _parked_target(conn, name, form.get("at"))
    requested = operations.request_replay(conn, name, target)
    if not requested.marked:
        return "no parked messages to replay"
    who = "its leader at its next lease renewal" if requested.leader_alive else "the next leader"
    return f"replay of {_messages(len(requested.marked))} requested; {who} replays them"


def take_purge(conn: psycopg.Connection[Any], name: str, form: Form) -> str:
    target = _parked_target(conn, name, form.get("at"))
    count = operations.purge_parked(conn, name, target)
    return f"purged {_messages(count)}"


def take_skip(conn: psycopg.Connection[Any], name: str, form: Form) -> str:
    outcome = operations.request_skip(conn, name, form.get("to") or "")
    if outcome.pending != outcome.requested:
        return f"a skip to {readable(outcome.pending)} is already pending; it covers this one"
    when = "at its next lease renewal" if outcome.leader_alive else "when a daemon next leads it"
    return f"skip to {readable(outcome.requested)} requested; applied {when}"


def take_seek(conn: psycopg.Connection[Any], name: str, form: Form) -> str:
    to = form.get("to") or ""
    preview = operations.preview_seek(conn, name, to=to)
    at, epoch = operations.seek(conn, name, to)
    return (
        f"now after {readable(at)} (epoch {epoch}): {_messages(preview.delivered_again)} to"
        f" deliver again, {_messages(preview.passed_over)} passed over"
    )


class Action(NamedTuple):
    propose: Callable[[psycopg.Connection[Any], str, Form], Proposal]
    take: Callable[[psycopg.Connection[Any], str, Form], str]


ACTIONS = {
    "replay": Action(propose_replay, take_replay),
    "purge": Action(propose_purge, take_purge),
    "skip": Action(propose_skip, take_skip),
    "seek": Action(propose_seek, take_seek),
}


def _what(action: str, name: str, form: Form) -> str:
    details = [f"{key}={quoted(value)}" for key, value in form.items() if key in ("at", "to")]
    return " ".join([action, quoted(name), *details])


def _action(request: Request, form: Form) -> tuple[str, Action, str]:
    action_name = form.get("action") or request.path_params.get("action") or ""
    action = ACTIONS.get(action_name)
    name = form.get("name") or ""
    if action is None or not name:
        raise RefusedError("name an action (replay, purge, skip, seek) and a subscription", 400)
    return action_name, action, name


def confirm(request: Request) -> HTMLResponse:
    form = dict(request.query_params)
    try:
        _, action, name = _action(request, form)
    except RefusedError as refusal:
        return page(request, "refused.html", refusal.status_code, reason=str(refusal))
    with connection(request) as conn:
        privileges = operations.privileges(conn)
        if not privileges.acts:
            return page(request, "refused.html", 403, reason=_role_refusal(privileges))
        proposal = action.propose(conn, name, form)
    return page(request, "confirm.html", proposal=proposal)


async def act(request: Request) -> Response:
    form = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
    return await run_in_threadpool(_act, request, form)


def _act(request: Request, form: Form) -> Response:
    visitor = request.state.visitor
    sessions: Sessions = request.app.state.sessions
    client = client_text(request)
    try:
        action_name, action, name = _action(request, form)
        what = _what(action_name, name, form)
    except RefusedError as refusal:
        audit.refused(visitor.holder, "an action", str(refusal), client)
        return page(request, "refused.html", refusal.status_code, reason=str(refusal))
    try:
        if not sessions.csrf_valid(visitor.session_id, form.get("csrf")):
            raise RefusedError("the form carried no valid CSRF token: open the page again", 403)
        if visitor.holder is None:
            raise RefusedError("nobody is signed in: actions need a token", 403)
        with connection(request) as conn:
            privileges = operations.privileges(conn)
            if not privileges.acts:
                raise RefusedError(_role_refusal(privileges), 403)
            outcome = action.take(conn, name, form)
    except RefusedError as refusal:
        audit.refused(visitor.holder, what, str(refusal), client)
        return page(request, "refused.html", refusal.status_code, reason=str(refusal))
    except SubscriptionError as error:
        audit.refused(visitor.holder, what, str(error), client)
        raise
    audit.done(visitor.holder, what, outcome)
    return page(request, "done.html", name=name, outcome=outcome, action=action_name)


def _role_refusal(privileges: operations.Privileges) -> str:
    return (
        f"this console connects as {quoted(privileges.role)}, which may not change"
        " subscriptions: run it as the schema's owner to act"
    )


def sign_in_form(request: Request) -> HTMLResponse:
    return page(request, "sign_in.html", next=safe_next(request.query_params.get("next")))


async def sign_in(request: Request) -> Response:
    form = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
    visitor = request.state.visitor
    sessions: Sessions = request.app.state.sessions
    tokens: list[Token] = request.app.state.config.tokens
    client = client_text(request)
    if not sessions.csrf_valid(visitor.session_id, form.get("csrf")):
        audit.refused(None, "sign-in", "no valid CSRF token", client)
        return page(request, "refused.html", 403, reason="the form carried no valid CSRF token")
    holder = token_holder(tokens, form.get("token", "")) if tokens else None
    if holder is None:
        audit.refused(None, "sign-in", "a token this console does not accept", client)
        return page(
            request, "sign_in.html", 403, next=safe_next(form.get("next")), wrong_token=True
        )
    sessions.sign_out(visitor.session_id)
    request.state.new_session_id = sessions.sign_in(holder)
    audit.done(holder, "sign-in", f"signed in from {client}")
    return RedirectResponse(safe_next(form.get("next")) or href(request, "/"), status_code=303)


async def sign_out(request: Request) -> Response:
    form = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
    visitor = request.state.visitor
    sessions: Sessions = request.app.state.sessions
    if not sessions.csrf_valid(visitor.session_id, form.get("csrf")):
        return page(request, "refused.html", 403, reason="the form carried no valid CSRF token")
    sessions.sign_out(visitor.session_id)
    request.state.new_session_id = new_session_id()
    if visitor.holder is not None:
        audit.done(visitor.holder, "sign-out", "signed out")
    return RedirectResponse(href(request, "/"), status_code=303)


def safe_next(value: str | None) -> str | None:
    """A path on this site to go back to after signing in; anything else (another site,
    `//host`, a scheme) is dropped."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return None
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return None
    return value
