"""Inside a shard, `pinned` still spreads keys evenly over the consumers.

A shard holds the keys whose shard hash (outbox.shards.message_shard: MD5) falls on it, and
pinned then places each key on crc32(key) % consumers (poller.subscription.key_queues). The
two must be independent: had the shard been crc32 too, shard s of n would hold only keys with
crc32 = s (mod n), and with a consumer count sharing a factor with n those keys land on a
fraction of the consumers, the rest idle however many there are.
"""

import zlib
from collections import Counter
from collections.abc import Callable

import pytest

from outbox.shards import message_shard
from poller.subscription.key_queues import owner_of

KEYS = [f"customer-{n}" for n in range(40_000)]


def consumer_shares(shard_of: Callable[[str], int], shard: int, consumers: int) -> list[float]:
    """The share of the shard's keys each consumer owns."""
    mine = [key for key in KEYS if shard_of(key) == shard]
    owners = Counter(owner_of(key, consumers) for key in mine)
    return [owners[consumer] / len(mine) for consumer in range(consumers)]


def even(shares: list[float]) -> bool:
    """Every consumer within a fifth of its fair share (20 to 30 % of 4 consumers)."""
    fair = 1 / len(shares)
    return all(0.8 * fair <= share <= 1.2 * fair for share in shares)


@pytest.mark.parametrize(("shards", "consumers"), [(2, 4), (4, 4), (3, 6), (8, 2)])
def test_every_shard_spreads_its_keys_evenly_over_its_consumers(
    shards: int, consumers: int
) -> None:
    for shard in range(shards):
        shares = consumer_shares(lambda key: message_shard(key, 0, shards), shard, consumers)
        assert even(shares), f"shard {shard} of {shards}: {shares}"


@pytest.mark.parametrize(("shards", "consumers"), [(2, 4), (4, 4), (3, 6), (8, 2)])
def test_a_crc32_shard_would_leave_consumers_idle(shards: int, consumers: int) -> None:
    # The hash the shard must not share with pinned, shown failing the same check.
    for shard in range(shards):
        shares = consumer_shares(lambda key: zlib.crc32(key.encode()) % shards, shard, consumers)
        assert not even(shares), f"shard {shard} of {shards}: {shares}"
        assert 0.0 in shares, shares
