"""When a leader may start a delivery, judged by its own monotonic clock alone.

The database fences every write by the lease's token, but handlers run outside it: a leader
whose backends were terminated (or whose network broke) keeps handing buffered messages to
handlers until its next database call fails, while a standby, seeing its session gone, takes
over at once. Two rules close that window without synchronised clocks:

- A leader starts deliveries only while its lease is certainly valid: the server extends the
  lease by lease_seconds from the moment it runs a renewal, which is after this process sent
  it, so `sent + lease_seconds` is never later than the real expiry. It stops `margin` seconds
  before that, so a handler started just in time has that long to finish before a successor
  may start the same key.
- A leader that took the lease over while it was still unexpired starts nothing until that
  lease has run out: the server tells how long it had left (a duration, so no clocks are
  compared), and the previous holder may be starting deliveries until then. The wait
  outlives the term: a term cut short during it (its connection lost) and followed by this
  process re-taking its own lease is told 0 s left by the server (the lease is its own), and
  still waits the rest (`earlier_not_before`).
"""

from dataclasses import dataclass


@dataclass
class SelfFence:
    lease_seconds: float
    margin: float
    not_before: float
    valid_until: float

    @classmethod
    def acquired(
        cls,
        *,
        lease_seconds: float,
        margin: float,
        sent_at: float,
        received_at: float,
        previous_lease_left: float,
        earlier_not_before: float = 0.0,
    ) -> "SelfFence":
        return cls(
            lease_seconds,
            margin,
            not_before=max(received_at + previous_lease_left, earlier_not_before),
            valid_until=sent_at + lease_seconds - margin,
        )

    def renewed(self, sent_at: float) -> None:
        """A renewal sent at `sent_at` extended the lease (on the renewer's thread: the
        handler threads read `valid_until`, a float, as it is)."""
        self.valid_until = max(self.valid_until, sent_at + self.lease_seconds - self.margin)

    def wait_before_start(self, now: float) -> float:
        """Seconds until the previous holder's lease has certainly run out."""
        return max(0.0, self.not_before - now)

    def lapsed(self, now: float) -> bool:
        """No renewal came through in time: this process may no longer be the leader."""
        return now >= self.valid_until

    def ran_out(self, now: float) -> bool:
        """No renewal was confirmed for a whole lease since the last one was sent: unless one
        still on its way extended it, the lease has run out on the server."""
        return now >= self.valid_until + self.margin

    def may_start(self, now: float) -> bool:
        return self.not_before <= now < self.valid_until
