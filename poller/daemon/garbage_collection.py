"""CPython's cyclic garbage collector, set for a process whose main job is the daemon.

Each message the daemon handles allocates a dozen small container objects (the read row's
Message and Position, the machine's records, a delivery and its outcome) that live for a few
milliseconds. At CPython's default thresholds (700, 10, 10) they set off a young collection
every sixty-odd messages and, every few thousand, a full one that walks every object of the
process: some 70,000 once the command line is imported. Profiled with py-spy (--gil), the
event loop spent about a third of its time there; a 300,000-message drain with a plain `def`
handler went from 67k to 100k messages/s with these settings.
"""

import gc

YOUNG_COLLECTION_EVERY = 10_000
"""Allocations between two young collections (CPython's default: 700)."""


def set_for_daemon() -> None:
    """Freeze what startup allocated (modules, classes, options: they live as long as the
    process) out of every later collection, and collect the young generation less often.

    Process-wide, so the library never calls it on its own: `outbox poll` does, once its
    handler is imported; an application that embeds the daemon may call it too.
    """
    gc.collect()  # garbage made so far is freed, not frozen
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)
