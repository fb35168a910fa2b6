"""How a daemon process behaves, as opposed to one subscription's stored settings."""

from dataclasses import dataclass


@dataclass(frozen=True)
class DaemonOptions:
    # A standby takes over within lease_seconds of a leader that stops renewing (paused,
    # partitioned), and at once when the leader's database session is gone (killed).
    lease_seconds: float = 4.0
    renew_every: float = 1.0
    standby_poll: float = 0.5
    poll_interval_min: float = 0.001
    poll_interval_max: float = 0.1
    hidden_recheck: float = 0.005
    stall_threshold: float = 5.0
    stall_repeat: float = 60.0
    shutdown_timeout: float = 10.0
    tick_every: float = 0.02
    handler_threads: int = 16

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"daemon option {name} must be > 0, got {value!r}")
        if self.renew_every >= self.lease_seconds:
            raise ValueError(
                f"renew_every={self.renew_every} must be shorter than"
                f" lease_seconds={self.lease_seconds}, or the lease lapses between renewals"
            )
