"""`outbox tail --plain`: the same events as lines, for pipes and scripts."""

from collections.abc import AsyncIterator, Callable

from outbox_cli.tail.rows import CAUGHT_UP_LINE, checkpoint_line, plain_line
from poller import CaughtUp, Checkpoint, Message


def event_line(event: Message | CaughtUp | Checkpoint) -> str:
    if isinstance(event, Message):
        return plain_line(event)
    if isinstance(event, Checkpoint):
        return checkpoint_line(event.at)
    return CAUGHT_UP_LINE


async def print_lines(
    events: AsyncIterator[Message | CaughtUp | Checkpoint], write_line: Callable[[str], None]
) -> None:
    async for event in events:
        write_line(event_line(event))
