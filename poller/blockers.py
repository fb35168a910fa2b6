"""Who holds back the safe frontier, as the daemon's stall warning and `outbox status` name
them: the store reads the rows (outbox.blocking_transactions), both make them Blockers."""

from typing import NamedTuple


class Blocker(NamedTuple):
    """A session or prepared transaction holding back the safe frontier (a row of
    outbox.blocking_transactions). Fields are None where pg_stat_activity hides them:
    another user's session, seen without pg_read_all_stats. `query_start` (the start of the
    session's SQL, password literals redacted) is None unless an operator asked for it."""

    kind: str
    pid: int | None
    database: str | None
    user_name: str | None
    application_name: str | None
    client_address: str | None
    state: str | None
    transaction_age: float | None
    query_start: str | None

    def describe(self) -> str:
        """One line for the daemon's stall warning: who holds the transaction, never its SQL
        (another database's session may be setting a password: `outbox status --show-query`
        shows the SQL to an operator who asks)."""
        who = f"pid {self.pid}" if self.pid is not None else f"gid {self.application_name!r}"
        age = "?" if self.transaction_age is None else f"{self.transaction_age:.1f}"
        return (
            f"{self.kind} {who} (database {self.database}, user {self.user_name},"
            f" application {self.application_name!r}, client {self.client_address or 'local'},"
            f" state {self.state}, in transaction for {age} s)"
        )
