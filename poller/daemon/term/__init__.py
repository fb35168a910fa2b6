"""One leadership term of one shard: the driver around the state machine, its writes, the
operator's requests, hidden rows, the quiet shard's rule, polling and
what wakes it (NOTIFY), the self-fence."""
