"""Cutting a CSV stream into pieces of whole rows. Pure, no I/O.

The psycopg fallback parses COPY's CSV with pyarrow one piece at a time, in the thread that
reads the COPY: pyarrow's streaming CSV reader would pull from the connection in a thread of
its own, and psycopg's cancel on an early stop then waits forever on the connection that
thread is still reading.
"""

from collections.abc import Iterable, Iterator


def whole_row_pieces(
    data: Iterable[bytes | bytearray | memoryview], piece_size: int
) -> Iterator[bytes]:
    """Re-cut `data` into pieces of whole rows, cut at the last row end once `piece_size`
    bytes are pending (a row longer than that makes a longer piece)."""
    pending = bytearray()
    for chunk in data:
        pending += chunk
        if len(pending) >= piece_size and (cut := last_row_end(pending)):
            yield bytes(pending[:cut])
            del pending[:cut]
    if pending:
        yield bytes(pending)


def last_row_end(buffer: bytes | bytearray) -> int:
    """The offset just past the last line break that ends a row, or 0 if none does.

    A quoted field may hold line breaks, and CSV doubles every quote inside one, so a line
    break ends a row exactly when an even number of quotes precedes it.
    """
    end = buffer.rfind(b"\n")
    while end >= 0:
        if buffer.count(b'"', 0, end) % 2 == 0:
            return end + 1
        end = buffer.rfind(b"\n", 0, end)
    return 0
