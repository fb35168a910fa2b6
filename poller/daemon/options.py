"""How a daemon process behaves, as opposed to one subscription's stored settings.

Each option's default and help text live here once; `outbox poll` makes its command-line
options from the fields marked `option`.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any


def _option(default: float | None, help_text: str, *, command_line: bool = True) -> Any:
    return dataclasses.field(
        default=default, metadata={"help": help_text, "command_line": command_line}
    )


# Not numbers: every other option must be > 0.
_NOT_NUMBERS = ("metrics_port", "read_database_url")


@dataclass(frozen=True)
class DaemonOptions:
    # A standby takes over within lease_seconds of a leader that stops renewing (paused,
    # partitioned), and at once when the leader's database session is gone (killed).
    lease_seconds: float = _option(
        4.0, "Seconds a standby waits for a leader that stopped renewing (paused, cut off)."
    )
    # Not on the command line: `outbox poll` derives it from lease_seconds (see with_lease).
    renew_every: float = _option(1.0, "Seconds between lease renewals.", command_line=False)
    standby_poll: float = _option(0.5, "Seconds between a standby's tries to take the lease.")
    poll_interval_min: float = _option(0.001, "Shortest wait after an empty read, seconds.")
    poll_interval_max: float = _option(0.1, "Longest wait after empty reads, seconds.")
    hidden_recheck: float = _option(
        0.005, "Re-read interval while committed rows wait behind an open transaction, s."
    )
    stall_threshold: float = _option(
        5.0, "Seconds committed messages may wait behind the safe frontier before a warning."
    )
    stall_repeat: float = _option(60.0, "Seconds between repeated stall warnings.")
    shutdown_timeout: float = _option(
        10.0, "Seconds handlers in flight get to finish after SIGTERM or SIGINT."
    )
    tick_every: float = _option(
        0.02, "Seconds between timeout and retry checks.", command_line=False
    )
    handler_threads: int = _option(16, "Threads per subscription for plain `def` handlers.")
    # A run costs one hop to a handler thread and one event in the state machine, however long
    # it is; runs are only as long as what is read, so they cost no latency when writes trickle.
    prefetch: int = _option(
        256,
        "Deliveries a consumer slot takes at once and runs in order (batch handlers:"
        " max_batch_size).",
    )
    # Retention (poller/daemon/process/retention.py; `outbox prune` and `outbox status` take
    # these too).
    retention_interval: float = _option(
        60.0, "Seconds between retention runs: partitions created ahead, old ones retired."
    )
    retention_minimum_age: float = _option(
        86400.0, "Seconds a message is kept at least, even once every subscription passed it."
    )
    partition_size: int = _option(
        1_000_000, "Positions per partition of outbox.messages (for partitions made from now)."
    )
    partitions_ahead: int = _option(2, "Empty partitions kept ready past the next position.")
    retention_lock_wait: float = _option(
        0.5, "Longest wait, s, for the locks that retire a partition (writers queue meanwhile)."
    )
    retention_stale_after: float = _option(
        3600.0, "Seconds a subscription may hold retention back before status calls it stale."
    )
    # None: no HTTP server at all (an embedding application may serve its own metrics).
    metrics_port: int | None = _option(
        None, "TCP port for Prometheus /metrics and the /healthz and /readyz probes."
    )
    # None: messages are read where everything else is (the daemon's database URL). Given by
    # `outbox poll --read-database-url`, which checks it first; out of repr, as it may hold a
    # password.
    read_database_url: str | None = dataclasses.field(
        default=None,
        repr=False,
        metadata={
            "help": "A read replica (a streaming-replication hot standby) of the database to"
            " read messages from; leases, checkpoints, parked rows and everything else stay"
            " on the database.",
            "command_line": False,
        },
    )

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if name not in _NOT_NUMBERS and not value > 0:
                raise ValueError(f"daemon option {name} must be > 0, got {value!r}")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise ValueError(
                f"daemon option metrics_port must be a TCP port from 1 to 65535,"
                f" got {self.metrics_port!r}"
            )
        if self.renew_every >= self.lease_seconds:
            raise ValueError(
                f"renew_every={self.renew_every} must be shorter than"
                f" lease_seconds={self.lease_seconds}, or the lease lapses between renewals"
            )

    @classmethod
    def with_lease(cls, **values: Any) -> "DaemonOptions":
        """Options whose renewal interval follows the lease: a quarter of it, at most the
        default, so three renewals can fail before a standby may take over."""
        lease = values.get("lease_seconds", cls.lease_seconds)
        return cls(**{"renew_every": min(cls.renew_every, lease / 4), **values})
