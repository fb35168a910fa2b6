"""A message's shard (outbox.shards.message_shard), and why it is not crc32."""

import zlib
from collections import Counter

from outbox.shards import message_shard
from poller.subscription.key_queues import owner_of

KEYS = [f"customer-{n}" for n in range(4000)]


def test_the_documented_hash_on_a_known_value() -> None:
    # md5("abc") = 900150983cd24fb0...: 0x90015098 = 2416005272, and 2416005272 % 7 = 2.
    assert message_shard("abc", 99, 7) == 2416005272 % 7 == 2
    assert message_shard(None, 99, 7) == 99 % 7


def test_keys_spread_evenly_over_shards() -> None:
    counts = Counter(message_shard(key, 0, 4) for key in KEYS)
    assert all(900 <= counts[shard] <= 1100 for shard in range(4)), counts


def test_inside_a_shard_pinned_keeps_every_consumer_busy() -> None:
    shard_zero = [key for key in KEYS if message_shard(key, 0, 2) == 0]
    counts = Counter(owner_of(key, 4) for key in shard_zero)
    assert all(counts[c] >= 0.2 * len(shard_zero) for c in range(4)), counts


def test_a_crc32_shard_hash_would_idle_half_the_consumers() -> None:
    # The pitfall this hash avoids, shown so the test above can fail: with crc32 for both,
    # every key of shard 0 of 2 has an even crc32, and lands on consumers 0 and 2 only.
    shard_zero = [key for key in KEYS if zlib.crc32(key.encode()) % 2 == 0]
    counts = Counter(owner_of(key, 4) for key in shard_zero)
    assert counts[1] == counts[3] == 0
