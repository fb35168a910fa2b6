"""Each action as its confirmation page shows it, and as it is then taken: exactly what the
page showed (poller.operations.confirmed), or nothing, with the page drawn again from what it
would change now."""

from collections.abc import Callable, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

import psycopg

from outbox.positions import readable
from poller import operations
from poller.operations import ParkedPreview, SeekPreview, SkipPreview, SubscriptionError, quoted

Form = Mapping[str, str]
Preview = SeekPreview | SkipPreview | ParkedPreview
P = TypeVar("P", SeekPreview, SkipPreview, ParkedPreview)


class Proposal(NamedTuple):
    """An action as its confirmation page shows it, and what it counted to say so."""

    action: str
    name: str
    title: str
    consequences: list[str]
    button: str
    shown: Preview
    """What the page counted: the action acts only while it still holds."""
    what: str
    """The action as the action log names it."""


def _messages(count: int) -> str:
    return "1 message" if count == 1 else f"{count} messages"


def _parked_preview(conn: psycopg.Connection[Any], name: str, form: Form) -> ParkedPreview:
    target = operations.parked_target(conn, name, form.get("at") or None, None)
    return operations.preview_parked(conn, name, target)


def _parked_what(shown: ParkedPreview) -> str:
    if shown.target is not None:
        return f"the parked message at {shown.target}"
    if shown.messages == 1:
        return "the one parked message"
    return f"the {shown.messages} parked messages"


def _parked_which(shown: ParkedPreview) -> str:
    """Which parked messages, as the page names them: the one, or those up to the last."""
    if shown.target is not None:
        return f"the message at {shown.target}"
    assert shown.up_to is not None  # _nothing_parked refused an empty set
    return (
        f"those parked when this page was drawn, up to {shown.up_to} in delivery order; one"
        " parked since is left as it is"
    )


def _nothing_parked(shown: ParkedPreview, verb: str) -> None:
    if shown.messages == 0:
        which = "no parked messages" if shown.target is None else "no such parked message"
        raise SubscriptionError(f"{quoted(shown.subscription)} has {which} to {verb}")


_CHANGED = (
    "If these are not exactly the parked messages when you confirm, nothing is changed and this"
    " page is shown again as things then stand."
)


def replay_proposal(shown: ParkedPreview) -> Proposal:
    _nothing_parked(shown, "replay")
    return Proposal(
        "replay",
        shown.subscription,
        f"Replay {_parked_what(shown)} of {shown.subscription}",
        [
            f"{_messages(shown.messages)} will be delivered again, ahead of new ones:"
            f" {_parked_which(shown)}. The leader of each message's shard replays it at its"
            " next lease renewal, or first the next leader when none leads now.",
            "The checkpoint does not move. A replay that fails parks its message again.",
            _CHANGED,
        ],
        f"Replay {_messages(shown.messages)}",
        shown,
        f"replay {quoted(shown.subscription)} {_parked_scope(shown)}",
    )


def purge_proposal(shown: ParkedPreview) -> Proposal:
    _nothing_parked(shown, "purge")
    return Proposal(
        "purge",
        shown.subscription,
        f"Purge {_parked_what(shown)} of {shown.subscription}",
        [
            f"{_messages(shown.messages)} will be dropped for good, never delivered again:"
            f" {_parked_which(shown)}.",
            _CHANGED,
        ],
        f"Purge {_messages(shown.messages)}",
        shown,
        f"purge {quoted(shown.subscription)} {_parked_scope(shown)}",
    )


def _parked_scope(shown: ParkedPreview) -> str:
    if shown.target is not None:
        return f"at={quoted(str(shown.target))}"
    return f"{_messages(shown.messages)} up to {shown.up_to}"


def _seek_preview(conn: psycopg.Connection[Any], name: str, form: Form) -> SeekPreview:
    given = {key: form.get(key) or None for key in ("to", "to_time", "to_message")}
    since = None if given["to_time"] is None else operations.parse_time(given["to_time"])
    return operations.preview_seek(
        conn, name, to=given["to"], since=since, message_id=given["to_message"]
    )


def seek_proposal(shown: SeekPreview) -> Proposal:
    consequences = [
        f"{_messages(shown.delivered_again)} will be delivered again (a checkpoint had"
        " passed them).",
        f"{_messages(shown.passed_over)} will be passed over: never delivered.",
        "Every shard moves; delivery resumes after this place, in a new epoch. Messages handled"
        " since the last stored checkpoint are delivered again, as after any restart.",
    ]
    if shown.voids_skip:
        consequences.append("The skip requested earlier ends: the seek starts a new epoch.")
    consequences.append(
        "If a checkpoint moves before you confirm and these counts change, nothing is changed"
        " and this page is shown again with the new ones."
    )
    return Proposal(
        "seek",
        shown.subscription,
        f"Seek {shown.subscription} to after {readable(shown.to)}",
        consequences,
        f"Seek: {_messages(shown.delivered_again)} again, {shown.passed_over} passed over",
        shown,
        f"seek {quoted(shown.subscription)} to={quoted(str(shown.to))}",
    )


def _skip_preview(conn: psycopg.Connection[Any], name: str, form: Form) -> SkipPreview:
    return operations.preview_skip(conn, name, form.get("to") or "")


def skip_proposal(shown: SkipPreview) -> Proposal:
    return Proposal(
        "skip",
        shown.subscription,
        f"Skip {shown.subscription} to {readable(shown.to)}",
        [
            f"At most {_messages(shown.finished_undelivered)} after the stored checkpoint, up to"
            f" {readable(shown.to)}, will be finished without being delivered. A running leader"
            " delivers some of them before it applies the skip (at its next lease renewal); the"
            " count when you confirm is what the next page says.",
            "The epoch stays: nothing after it is delivered twice. Without a leader, the next"
            " one applies the skip before it reads.",
        ],
        f"Skip at most {_messages(shown.finished_undelivered)}",
        shown,
        f"skip {quoted(shown.subscription)} to={quoted(str(shown.to))}",
    )


def take_replay(conn: psycopg.Connection[Any], shown: ParkedPreview) -> str:
    requested = operations.replay_as_shown(conn, shown)
    who = "its leader at its next lease renewal" if requested.leader_alive else "the next leader"
    return (
        f"replay of {_messages(len(requested.marked))} requested ({_parked_scope(shown)},"
        f" as shown); {who} replays them"
    )


def take_purge(conn: psycopg.Connection[Any], shown: ParkedPreview) -> str:
    purged = operations.purge_as_shown(conn, shown)
    return f"purged {_messages(len(purged))} ({_parked_scope(shown)}, as shown)"


def take_skip(conn: psycopg.Connection[Any], shown: SkipPreview) -> str:
    taken = operations.skip_as_shown(conn, shown)
    requested = taken.requested
    if requested.pending != requested.requested:
        return f"a skip to {readable(requested.pending)} is already pending; it covers this one"
    when = "at its next lease renewal" if requested.leader_alive else "when a daemon next leads it"
    return (
        f"skip to {readable(requested.requested)} requested, applied {when}: at most"
        f" {_messages(taken.finished_undelivered)} after the stored checkpoint now are finished"
        " without delivery"
    )


def take_seek(conn: psycopg.Connection[Any], shown: SeekPreview) -> str:
    at, epoch = operations.seek_as_shown(conn, shown)
    return (
        f"now after {readable(at)} (epoch {epoch}): {_messages(shown.delivered_again)} to"
        f" deliver again, {_messages(shown.passed_over)} passed over"
    )


class Action(NamedTuple, Generic[P]):
    preview: Callable[[psycopg.Connection[Any], str, Form], P]
    """What the action would change, from the confirmation page's query."""
    proposal: Callable[[P], Proposal]
    take: Callable[[psycopg.Connection[Any], P], str]
    """Take it as shown (or raise ChangedSinceShownError); the outcome, said."""


ACTIONS: dict[str, Action[Any]] = {
    "replay": Action(_parked_preview, replay_proposal, take_replay),
    "purge": Action(_parked_preview, purge_proposal, take_purge),
    "skip": Action(_skip_preview, skip_proposal, take_skip),
    "seek": Action(_seek_preview, seek_proposal, take_seek),
}
