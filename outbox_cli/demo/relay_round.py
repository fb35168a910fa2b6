"""The demo's last act, when NATS answers on localhost: the same messages relayed to a
JetStream stream by `relays`, counted back from the stream (one each, none lost)."""

import asyncio
import importlib
import socket
import time
import uuid
from dataclasses import dataclass

import psycopg

from poller import operations
from poller.daemon import DaemonOptions, DaemonThread

NATS_ADDRESS = ("127.0.0.1", 4222)


@dataclass(frozen=True)
class RelayRound:
    stream: str
    committed: int
    in_stream: int


def relay_round_unavailable() -> str | None:
    """Why the relay round cannot run here, or None when it can."""
    try:
        importlib.import_module("nats")  # the relays extra's NATS client
    except ModuleNotFoundError:
        return "the relays extra is not installed"
    try:
        socket.create_connection(NATS_ADDRESS, timeout=0.5).close()
    except OSError:
        return f"no NATS on {NATS_ADDRESS[0]}:{NATS_ADDRESS[1]}"
    return None


def relay_to_nats(url: str, publication: str, committed: int) -> RelayRound:
    """Relay every message of `publication` to a stream the relay declares, then count them
    there; the subscription and the stream are removed after."""
    import outbox_relays  # the broker clients are an extra: imported only when NATS answers

    tag = uuid.uuid4().hex[:8]
    stream, subscription = f"OUTBOX_DEMO_{tag}", f"{publication}-nats"
    relay = outbox_relays.handler(
        f"nats://{NATS_ADDRESS[0]}:{NATS_ADDRESS[1]}?subject=outbox_demo_{tag}.{{message_type}}"
        f"&stream={stream}",
        declare=True,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        operations.create(conn, subscription, publication, "start", {})
        try:
            options = DaemonOptions(lease_seconds=2.0, renew_every=0.5)
            with DaemonThread(url, [subscription], relay, options, closers=[relay.close]):
                deadline = time.monotonic() + 30
                while _held(stream) < committed and time.monotonic() < deadline:
                    time.sleep(0.2)
            return RelayRound(stream, committed, _held(stream))
        finally:
            operations.delete(conn, subscription)
            asyncio.run(_delete(stream))


def _held(stream: str) -> int:
    return asyncio.run(_count(stream))


async def _count(stream: str) -> int:
    import nats
    from nats.js.errors import NotFoundError

    connection = await nats.connect(f"nats://{NATS_ADDRESS[0]}:{NATS_ADDRESS[1]}")
    try:
        return (await connection.jetstream().stream_info(stream)).state.messages
    except NotFoundError:  # not declared yet: the relay's first batch creates it
        return 0
    finally:
        await connection.close()


async def _delete(stream: str) -> None:
    import nats
    from nats.js.errors import NotFoundError

    connection = await nats.connect(f"nats://{NATS_ADDRESS[0]}:{NATS_ADDRESS[1]}")
    try:
        await connection.jetstream().delete_stream(stream)
    except NotFoundError:
        pass
    finally:
        await connection.close()
