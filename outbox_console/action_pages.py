"""The pages that act: a confirmation that says what an action will change, the action itself
(a POST of the confirmation's form, once, carrying its CSRF token, from a session an
operator's token signed in, on a database role that may act), and signing in and out. Every
action, taken or refused, is logged (audit.py).
"""

import math
from typing import Any
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from outbox_console import audit
from outbox_console.confirmations import Confirmations
from outbox_console.database import connection
from outbox_console.parameters import refuse_nul
from outbox_console.proposals import ACTIONS, Action, Form, Proposal
from outbox_console.rendering import href, page
from outbox_console.sessions import Sessions, new_session_id
from outbox_console.throttle import WINDOW_SECONDS, SignInThrottle
from outbox_console.tokens import Token, token_holder
from outbox_console.visitors import client_text
from poller import operations
from poller.operations import ChangedSinceShownError, SubscriptionError, quoted


class RefusedError(Exception):
    def __init__(self, reason: str, status_code: int) -> None:
        super().__init__(reason)
        self.status_code = status_code


def _what(form: Form) -> str:
    """An action as a post that no confirmation stands behind names it, for the log."""
    details = [f"{key}={quoted(value)}" for key, value in form.items() if key in ("at", "to")]
    return " ".join([form.get("action") or "an action", quoted(form.get("name") or ""), *details])


def _action(form: Form) -> tuple[Action[Any], str]:
    action = ACTIONS.get(form.get("action") or "")
    name = form.get("name") or ""
    if action is None or not name:
        raise RefusedError("name an action (replay, purge, skip, seek) and a subscription", 400)
    refuse_nul(name, "name")
    return action, name


def confirm(request: Request) -> HTMLResponse:
    form = dict(request.query_params)
    try:
        action, name = _action(form)
    except RefusedError as refusal:
        return page(request, "refused.html", refusal.status_code, reason=str(refusal))
    with connection(request) as conn:
        privileges = operations.privileges(conn)
        if not privileges.acts:
            return page(request, "refused.html", 403, reason=_role_refusal(privileges))
        proposal = action.proposal(action.preview(conn, name, form))
    return _confirmation(request, proposal)


def _confirmation(request: Request, proposal: Proposal, *, changed: bool = False) -> HTMLResponse:
    """The confirmation page; for an operator, with a form good for this one action."""
    visitor = request.state.visitor
    confirmations: Confirmations[Proposal] = request.app.state.confirmations
    kept = confirmations.keep(visitor.session_id, proposal) if visitor.acts else None
    status_code = 409 if changed else 200
    return page(
        request, "confirm.html", status_code, proposal=proposal, confirmation=kept, changed=changed
    )


async def act(request: Request) -> Response:
    form = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
    return await run_in_threadpool(_act, request, form)


def _act(request: Request, form: Form) -> Response:
    visitor = request.state.visitor
    sessions: Sessions = request.app.state.sessions
    confirmations: Confirmations[Proposal] = request.app.state.confirmations
    client = client_text(request)
    confirmation = form.get("confirmation")
    shown = confirmations.shown(visitor.session_id, confirmation)
    what = _what(form) if shown is None else shown.what
    try:
        if not sessions.csrf_valid(visitor.session_id, form.get("csrf")):
            raise RefusedError("the form carried no valid CSRF token: open the page again", 403)
        if visitor.holder is None:
            raise RefusedError("nobody is signed in: actions need a token", 403)
        if not visitor.acts:
            raise RefusedError(
                f"{visitor.holder} signed in with a reader's token: actions need an operator's",
                403,
            )
        with connection(request) as conn:
            privileges = operations.privileges(conn)
            if not privileges.acts:
                raise RefusedError(_role_refusal(privileges), 403)
            proposal = confirmations.take(visitor.session_id, confirmation)
            if proposal is None:
                raise RefusedError(
                    "no confirmation stands behind this form (it was used already, is too old,"
                    " or never was): open the action again to see what it would change now",
                    409,
                )
            action = ACTIONS[proposal.action]
            try:
                outcome = action.take(conn, proposal.shown)
            except ChangedSinceShownError as changed:
                again = action.proposal(changed.now)
                audit.refused(visitor.holder, what, str(changed), client)
                return _confirmation(request, again, changed=True)
    except RefusedError as refusal:
        audit.refused(visitor.holder, what, str(refusal), client)
        return page(request, "refused.html", refusal.status_code, reason=str(refusal))
    except SubscriptionError as error:
        audit.refused(visitor.holder, what, str(error), client)
        raise
    audit.done(visitor.holder, what, outcome)
    return page(request, "done.html", name=proposal.name, outcome=outcome)


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
    throttle: SignInThrottle = request.app.state.throttle
    client = client_text(request)
    if not sessions.csrf_valid(visitor.session_id, form.get("csrf")):
        audit.refused(None, "sign-in", "no valid CSRF token", client)
        return page(request, "refused.html", 403, reason="the form carried no valid CSRF token")
    wait = throttle.wait_seconds(client)
    if wait > 0:
        # Not logged each time: the throttle's start was, and a guesser would flood the log.
        refused = page(
            request,
            "refused.html",
            429,
            reason=f"too many wrong tokens from {client}: try again in {math.ceil(wait)} s",
        )
        refused.headers["retry-after"] = str(math.ceil(wait))
        return refused
    holder = token_holder(tokens, form.get("token", "")) if tokens else None
    if holder is None:
        throttled = throttle.failed(client)
        reason = "a token this console does not accept"
        if throttled:
            reason += f"; no token from {client} is compared for {WINDOW_SECONDS:.0f} s"
        audit.refused(None, "sign-in", reason, client)
        return page(
            request, "sign_in.html", 403, next=safe_next(form.get("next")), wrong_token=True
        )
    sessions.sign_out(visitor.session_id)
    request.state.new_session_id = sessions.sign_in(holder.name, holder.role)
    audit.done(holder.name, "sign-in", f"signed in as {holder.role} from {client}")
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
