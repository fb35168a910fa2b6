"""`outbox tail --plain`: the same events as lines, for pipes and scripts."""

import asyncio
import os
import select
import stat
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


async def until_the_reader_leaves(fd: int) -> None:
    """Return once `fd`, the tail's output, is a pipe whose reader has closed it (`| head`
    has read enough); never for a terminal or a file. A tail writes only when a message comes,
    so on a quiet publication it would learn of the closed pipe at the next message: maybe
    never. The kernel reports EPOLLERR on a pipe's writing end once no reader is left, whatever
    events were asked for, and asyncio hands that to a reader callback."""
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        await asyncio.Event().wait()
    gone = asyncio.Event()
    check = select.poll()
    check.register(fd, 0)  # POLLERR and POLLHUP are always reported

    def closed() -> None:
        if any(events & (select.POLLERR | select.POLLHUP) for _, events in check.poll(0)):
            gone.set()

    loop = asyncio.get_running_loop()
    loop.add_reader(fd, closed)
    try:
        await gone.wait()
    finally:
        loop.remove_reader(fd)
