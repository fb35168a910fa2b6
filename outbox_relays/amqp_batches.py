"""A batch of AMQP publishes handed to an aiormq channel at once: one hold of its lock, one
marshalled payload, one socket write, a confirmation future per message.

aiormq publishes one message per call. Each call takes the channel's lock, builds two timeout
and close-watching contexts, marshals its own frames and queues them for the connection's
writer, which writes each message to the socket on its own; a batch needs a task per call to
have its confirms awaited together. In the RabbitMQ relay's profile (py-spy, 1,000 msg/s) that
per-message machinery was most of its CPU. `publish` does what `Channel.basic_publish` does,
for the whole batch: the same frames, the same delivery tags, and the same confirmation futures
in the channel's own tables, so the broker's acks, nacks, returns and a closing channel answer
each message exactly as they answer aiormq's own publishes.

It uses the state `basic_publish` keeps on the channel (`delivery_tag`, `confirmations`,
`message_id_delivery_tag`, `write_queue`): pyproject bounds aiormq to the minor version this
was written against, and the relays' target contract tests prove acks, returns, nacks and a
closed channel on the real broker.
"""

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import aiormq
from aiormq.abc import ChannelFrame, ConfirmationFrameType, FrameType
from pamqp import commands
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

Confirmation = asyncio.Future[ConfirmationFrameType]


@dataclass(frozen=True, slots=True)
class Publish:
    """One message as AMQP 0-9-1 sends it: routed by exchange and routing key, mandatory (an
    unroutable message comes back as a return instead of being dropped)."""

    exchange: str
    routing_key: str
    properties: commands.Basic.Properties
    """Its message_id is required: the broker's return names a message by it."""
    body: bytes


async def publish(channel: aiormq.Channel, batch: Sequence[Publish]) -> list[Confirmation]:
    """Write `batch` in order on `channel` (opened with publisher confirms) and return each
    message's confirmation: an ack's frame, or the error of its nack (DeliveryError), return
    (PublishError) or of the channel's closing."""
    if any(not item.properties.message_id for item in batch):
        raise ValueError("an AMQP publish in a batch needs a message_id")
    frames: list[FrameType | ContentBody] = []
    confirmations: list[Confirmation] = []
    async with channel.lock:
        first_tag = channel.delivery_tag + 1
        try:
            for item in batch:
                message_id = str(item.properties.message_id)
                channel.delivery_tag += 1
                tag = channel.delivery_tag
                confirmation: Confirmation = channel.create_future()
                channel.confirmations[tag] = confirmation
                channel.message_id_delivery_tag[message_id] = tag
                confirmation.add_done_callback(partial(_forget, channel, message_id, tag))
                confirmations.append(confirmation)
                frames += (
                    commands.Basic.Publish(
                        exchange=item.exchange, routing_key=item.routing_key, mandatory=True
                    ),
                    ContentHeader(properties=item.properties, body_size=len(item.body)),
                    *channel._split_body(item.body),  # the body cut at the frame size agreed
                )
            payload = ChannelFrame.marshall(channel_number=channel.number, frames=frames)
            await channel.write_queue.put(payload)
        except BaseException:
            # Nothing reached the broker (a frame pamqp would not marshal, a cancelled
            # wait for the writer's queue): give the tags back while the lock is held, as
            # basic_publish does, so the broker's numbering and the channel's stay one.
            channel.delivery_tag = first_tag - 1
            for tag, confirmation in enumerate(confirmations, first_tag):
                channel.confirmations.pop(tag, None)
                confirmation.cancel()
            raise
    return confirmations


def _forget(channel: aiormq.Channel, message_id: str, tag: int, _: Confirmation) -> None:
    """The return table's entry, once its message is answered (unless reused since)."""
    if channel.message_id_delivery_tag.get(message_id) == tag:
        del channel.message_id_delivery_tag[message_id]
