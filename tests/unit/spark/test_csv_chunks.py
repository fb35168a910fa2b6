"""Re-cutting COPY's CSV into pieces of whole rows, whatever the rows hold."""

import csv
import io

from hypothesis import given
from hypothesis import strategies as st

from outbox_spark.csv_chunks import last_row_end, whole_row_pieces

fields = st.text(alphabet='ab,"\n\r ', max_size=8)
rows_strategy = st.lists(st.lists(fields, min_size=1, max_size=3), min_size=1, max_size=20)


def to_csv(rows: list[list[str]]) -> bytes:
    # QUOTE_MINIMAL and "\n" line ends, as COPY ... (FORMAT csv) writes.
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def parse(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(), newline="")))


@given(rows_strategy, st.lists(st.integers(1, 40), min_size=1), st.integers(1, 64))
def test_pieces_hold_whole_rows_and_rejoin_to_the_stream(
    rows: list[list[str]], chunk_sizes: list[int], piece_size: int
) -> None:
    data = to_csv(rows)
    # COPY hands data over in chunks that ignore row boundaries.
    chunks: list[bytes] = []
    offset = 0
    while offset < len(data):
        size = chunk_sizes[len(chunks) % len(chunk_sizes)]
        chunks.append(data[offset : offset + size])
        offset += size

    pieces = list(whole_row_pieces(chunks, piece_size))

    assert b"".join(pieces) == data
    # Each piece parses on its own into whole rows: no row is cut in two.
    assert [row for piece in pieces for row in parse(piece)] == parse(data)


def test_a_line_break_inside_quotes_does_not_end_a_row() -> None:
    assert last_row_end(b'1,"a\nb"') == 0
    assert last_row_end(b'1,"a\nb"\n2,"c\n') == len(b'1,"a\nb"\n')
    assert last_row_end(b'1,"say ""hi"""\n2') == len(b'1,"say ""hi"""\n')
