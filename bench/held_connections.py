"""How many connections the daemons hold on the bench's database, sampled while they run, and
how many the server can spare them.

During a drain only the daemons and the bench itself connect to the bench's database, and the
bench's own connections carry the application name BENCH_CONNECTION, so the other client
backends in it are the daemons'. This relies on nothing of the daemon but its connections, so it
counts whatever the daemon's design opens.

The server may be shared with others (tests on the same machine): the budget is what it had
free when a run began, less a margin for them, and a run whose daemons go over it is cut
short rather than left to take every slot of the server.
"""

import threading
from types import TracebackType

import psycopg

SAMPLE_EVERY = 0.05  # seconds
MARGIN = 10  # connections left to others on a shared server
BENCH_CONNECTION = "outbox bench"  # application_name of the bench's own connections


def connection_budget(url: str) -> tuple[int, int]:
    """Connections the server can give the daemons now, and on a server nobody else uses:
    max_connections, less the slots reserved for superusers, less MARGIN, and for now less
    every client connected now."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('max_connections')::int"
            " - current_setting('superuser_reserved_connections')::int,"
            " (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        ).fetchone()
    assert row is not None
    idle_server, connected = int(row[0]) - MARGIN, int(row[1])
    # This connection counted itself; it is gone once the daemons start.
    return idle_server - connected + 1, idle_server


class HeldConnections:
    """Samples, every SAMPLE_EVERY seconds in a thread, the client connections to the bench's
    database other than the bench's own. `most` is the largest sample; `over_budget` is set once a
    sample went over `budget`. Use as a context manager around the daemons' run."""

    def __init__(self, url: str, budget: int) -> None:
        self.budget = budget
        self.most = 0
        self.over_budget = threading.Event()
        self._conn = psycopg.connect(url, autocommit=True, application_name=BENCH_CONNECTION)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="held-connections")

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            row = self._conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND backend_type = 'client backend'"
                " AND application_name <> %s",
                (BENCH_CONNECTION,),
            ).fetchone()
            assert row is not None
            self.most = max(self.most, int(row[0]))
            if self.most > self.budget:
                self.over_budget.set()

    def __enter__(self) -> "HeldConnections":
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()
