"""A message's shard (outbox.shards.message_shard): the documented hash, and an even spread.
Why it is not crc32: test_shard_consumer_spread.py."""

from collections import Counter

from outbox.shards import message_shard

KEYS = [f"customer-{n}" for n in range(4000)]


def test_the_documented_hash_on_a_known_value() -> None:
    # md5("abc") = 900150983cd24fb0...: 0x90015098 = 2416005272, and 2416005272 % 7 = 2.
    assert message_shard("abc", 99, 7) == 2416005272 % 7 == 2
    assert message_shard(None, 99, 7) == 99 % 7


def test_keys_spread_evenly_over_shards() -> None:
    counts = Counter(message_shard(key, 0, 4) for key in KEYS)
    assert all(900 <= counts[shard] <= 1100 for shard in range(4)), counts
