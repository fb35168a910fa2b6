"""The process and the shards it leads: a coordinator per subscription, a worker per shard, the
connections and the read they share, retention."""
