"""Handlers of every shape `outbox poll` must accept, and of the shapes it must refuse at start
(they could take no message: every delivery would fail and park)."""

import functools
from typing import Any

import poller
from poller.message import Message

# Refused ----------------------------------------------------------------------------------


def takes_nothing() -> None:
    pass


def takes_two(message: Message, other: object) -> None:
    pass


def wants_a_keyword(message: Message, *, reply_to: str) -> None:
    pass


# The shape under test is one batch_handler's type refuses: the daemon must refuse it too.
@poller.batch_handler(max_batch_size=10)  # type: ignore[type-var]
def batch_of_two(messages: list[Message], other: object) -> None:
    pass


class CallsWithNothing:
    def __call__(self) -> None:
        pass


calls_with_nothing = CallsWithNothing()

# Accepted ---------------------------------------------------------------------------------


def takes_one(message: Message) -> None:
    pass


async def takes_one_async(message: Message) -> None:
    pass


def takes_any(*arguments: Any, **options: Any) -> None:
    pass


def takes_one_and_defaults(message: Message, retries: int = 3, *, reply_to: str = "") -> None:
    pass


class CallsWithOne:
    def __call__(self, message: Message) -> None:
        pass


calls_with_one = CallsWithOne()

second_given = functools.partial(takes_two, other="given")


@poller.batch_handler(max_batch_size=10)
async def batch_of_one(messages: list[Message]) -> None:
    pass


class Batches:
    async def __call__(self, messages: list[Message]) -> None:
        pass


batches = poller.batch_handler(max_batch_size=10)(Batches())
