"""The JetStream stream a NATS relay publishes into: found, declared, and checked.

When a relay connects, it asks JetStream (a server without it is named as such), declares the
stream with --declare (again after it went missing: a deleted stream, a restarted server with
an empty store), and once per process checks the stream's settings against what exactly once
needs, warning where they cannot keep it:
- a duplicate window shorter than a plausible outage plus restart (JetStream's default is
  two minutes): a batch published again after it is stored twice;
- memory storage: a server restart loses the messages and the Msg-Ids;
- a stream whose name is not stream=: the relay publishes wherever the subjects are captured,
  and --declare creates nothing then, so that stream's settings are what count;
- discard=new with a limit: JetStream then refuses one message and may store the next, so a
  key's later message can land ahead of an earlier one (the relay sends the refused one
  again behind it: its order holds for a consumer that keeps each message's last copy).
"""

import logging
import string

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig

from outbox_relays.target import BrokerUnavailable

log = logging.getLogger(__name__)

DUPLICATE_WINDOW = 2 * 60 * 60.0
"""Seconds a declared stream remembers Msg-Ids. A re-publish is de-duplicated only within
it, so it must outlast the longest gap between a first attempt and its retry: a broker or
database outage plus the relay's restart. JetStream's default of two minutes does not; the
cost is the server's memory for the ids of two hours of messages."""

SHORTEST_SAFE_WINDOW = 10 * 60.0
"""A duplicate window below this is warned about: shorter than a plausible restart."""


def captured_subjects(template: str) -> str:
    """The stream subject that covers every subject `template` renders: a token holding a
    field becomes `*`, and the last one `>`, as a message type may itself contain dots."""
    tokens = template.split(".")
    last = len(tokens) - 1
    captured = []
    for index, token in enumerate(tokens):
        if any(field is not None for _, field, _, _ in string.Formatter().parse(token)):
            captured.append(">" if index == last else "*")
        else:
            captured.append(token.format())  # a literal token, with {{ and }} unescaped
    return ".".join(captured)


class StreamKeeper:
    """What the relay knows of its stream: its name (stream=), the subjects the template
    needs captured, whether to declare it, and whether its settings were checked."""

    def __init__(self, name: str, template: str, address: str, *, declare: bool) -> None:
        self.name = name
        self.subjects = captured_subjects(template)
        self.declare = declare
        self._address = address
        self._checked = False

    async def prepare(self, js: JetStreamContext) -> None:
        """On each new connection: JetStream is there, the stream declared (with --declare),
        and its settings checked once per process. Raises BrokerUnavailable."""
        try:
            found = await self._capturing(js)
            if found is None and self.declare:
                log.warning(
                    "relay: declaring NATS stream %r for subjects %r", self.name, self.subjects
                )
                await js.add_stream(
                    name=self.name,
                    subjects=[self.subjects],
                    storage=StorageType.FILE,
                    duplicate_window=DUPLICATE_WINDOW,
                )
                found = await self._capturing(js)
        except nats.js.errors.ServiceUnavailableError:
            raise self.no_jetstream() from None
        except nats.js.errors.APIError as error:
            raise BrokerUnavailable(
                "missing",
                f"NATS: cannot create stream {self.name!r} for subjects {self.subjects!r}:"
                f" {error.description} (JetStream error {error.err_code})",
            ) from None
        except TimeoutError:
            raise BrokerUnavailable(
                "timeout", f"NATS {self._address}: no JetStream API reply about the stream"
            ) from None
        except (OSError, nats.errors.Error) as error:
            raise BrokerUnavailable("connection", f"NATS {self._address}: {error}") from None
        if found is not None and not self._checked:
            self._checked = True
            for warning in stream_warnings(found, self.name, self.subjects):
                log.warning("relay to NATS: %s", warning)

    async def exists(self, js: JetStreamContext) -> bool | None:
        """Whether the stream stream= names exists; None when JetStream did not say."""
        try:
            await js.stream_info(self.name)
        except nats.js.errors.NotFoundError:
            return False
        except (nats.js.errors.Error, nats.errors.Error, OSError, TimeoutError):
            return None
        return True

    def missing(self, subject: str) -> BrokerUnavailable:
        hint = (
            "it is declared again at the next attempt"
            if self.declare
            else "create one, or run the relay with --declare"
        )
        return BrokerUnavailable(
            "missing", f"NATS: no JetStream stream captures subject {subject!r} ({hint})"
        )

    def no_jetstream(self) -> BrokerUnavailable:
        return BrokerUnavailable(
            "missing",
            f"NATS {self._address} has no JetStream (start nats-server with -js, or enable it"
            " for this account)",
        )

    async def _capturing(self, js: JetStreamContext) -> StreamConfig | None:
        """The stream that captures the template's subjects (None: no stream does). Raises
        BrokerUnavailable when the stream named stream= exists and captures none of them: a
        relay misconfigured, not one message's problem."""
        try:
            named: StreamConfig | None = (await js.stream_info(self.name)).config
        except nats.js.errors.NotFoundError:
            named = None
        try:
            capturing = await js.find_stream_name_by_subject(self.subjects)
        except nats.js.errors.NotFoundError:
            capturing = None
        if capturing is None and named is not None:
            raise BrokerUnavailable(
                "missing",
                f"NATS: stream {self.name!r} captures none of {self.subjects!r} (its subjects:"
                f" {', '.join(named.subjects or [])}): add them to it, or name another stream="
                + ("" if self.declare else ", or run the relay with --declare"),
            )
        if capturing is None or capturing == self.name:
            return named
        return (await js.stream_info(capturing)).config


def stream_warnings(config: StreamConfig, name: str, subjects: str) -> list[str]:
    """Why the stream `config` cannot keep the exactly-once promise, each said once."""
    called = config.name
    warnings = []
    if called != name:
        warnings.append(
            f"stream {called!r} captures {subjects!r}, not stream={name!r}: the relay publishes"
            f" into {called!r} and --declare creates nothing; its settings are the ones checked"
            f" (set stream={called} to say so)"
        )
    window = config.duplicate_window or 120.0  # JetStream's default when unset
    if window < SHORTEST_SAFE_WINDOW:
        warnings.append(
            f"stream {called!r} remembers Msg-Ids for {window:g} s (duplicate_window): a batch"
            " published again after a longer outage or restart is stored twice; set hours"
            f" (--declare sets {DUPLICATE_WINDOW:g} s)"
        )
    if config.storage == StorageType.MEMORY:
        warnings.append(
            f"stream {called!r} keeps its messages in memory: a server restart loses them and"
            " their Msg-Ids, confirmed or not"
        )
    limited = any(
        (limit or 0) > 0
        for limit in (config.max_msgs, config.max_bytes, config.max_msgs_per_subject)
    )
    if config.discard == DiscardPolicy.NEW and limited:
        warnings.append(
            f"stream {called!r} discards new messages at its limits: one refused while a later"
            " one of its key is stored puts that later one first (the refused one follows it)"
        )
    return warnings
