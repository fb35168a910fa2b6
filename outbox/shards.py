"""Which shard of a sharded subscription a message belongs to, computed as the database does.

outbox.message_shard (sql/schema.sql) decides; this is the same rule for code that needs to know
without asking the database (a test, a producer choosing keys), and the reference for other
languages: the first 4 bytes of the MD5 digest of the UTF-8 partition key, read as an unsigned
big-endian integer, modulo the shard count; a keyless message goes by its position modulo the
shard count. Not crc32: inside a shard `pinned` places keys on consumers by crc32 modulo the
consumer count, and one hash for both would leave consumers of every shard idle.
"""

import hashlib

MAX_SHARDS = 256


def message_shard(partition_key: str | None, position: int, shard_count: int) -> int:
    if partition_key is None:
        return position % shard_count
    digest = hashlib.md5(partition_key.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big") % shard_count
