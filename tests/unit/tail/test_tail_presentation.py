"""The pure parts of `outbox tail`: rows, the bounded buffer and the status line."""

import datetime

import pytest

from outbox.positions import Position
from outbox_cli.tail.buffer import DEFAULT_ROW_LIMIT, RowBuffer
from outbox_cli.tail.rows import (
    DATA_CUT,
    checkpoint_line,
    message_details,
    message_line,
    plain_line,
)
from outbox_cli.tail.status import StreamStatus, duration_text
from poller import Message

APPENDED = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def message(position: int, data_text: str = '{"n": 1}', **fields: object) -> Message:
    values: dict[str, object] = {
        "position": position,
        "transaction_id": 1000 + position,
        "publication": "orders",
        "message_id": f"id-{position}",
        "message_type": "OrderPlaced",
        "partition_key": "customer-7",
        "data_text": data_text,
        "headers_text": '{"trace": "abc"}',
        "appended_at": APPENDED,
        **fields,
    }
    return Message(**values)  # type: ignore[arg-type]


def test_a_message_row_has_position_transaction_type_key_and_the_start_of_the_data() -> None:
    line = message_line(message(7))
    assert line.split() == ["7", "1007", "OrderPlaced", "customer-7", '{"n":', "1}"]


def test_long_data_is_cut_with_an_ellipsis_and_the_row_keeps_its_columns() -> None:
    long = '{"text": "' + "x" * 500 + '"}'
    line = message_line(message(7, long))
    assert line.endswith("…")
    assert len(line) == len(message_line(message(7))) - len('{"n": 1}') + DATA_CUT


def test_control_characters_from_writers_are_shown_escaped_not_sent_to_the_terminal() -> None:
    line = message_line(message(7, message_type="Evil\x1b[2J", partition_key="a\nb"))
    assert "\x1b" not in line
    assert "\n" not in line
    assert "Evil\\x1b[2J" in line
    assert "a\\nb" in line


def test_a_message_without_key_shows_a_dash() -> None:
    assert message_line(message(7, partition_key=None)).split()[3] == "-"


def test_checkpoint_line() -> None:
    assert checkpoint_line(Position(881, 6)) == "[CHECKPOINT tx=881 pos=6]"


def test_plain_line_is_tab_separated_with_the_whole_data() -> None:
    long = '{"text": "' + "x" * 500 + '"}'
    assert plain_line(message(7, long)).split("\t") == ["1007:7", "OrderPlaced", "customer-7", long]


def test_details_show_every_field_and_the_whole_data() -> None:
    long_text = "y" * 500
    shown = message_details(message(7, '{"text": "' + long_text + '"}'))
    for expected in ("1007:7", "--from 1007:7", "id-7", "OrderPlaced", "customer-7"):
        assert expected in shown
    assert APPENDED.isoformat() in shown
    assert '"trace": "abc"' in shown
    assert long_text in shown


def test_the_buffer_keeps_the_newest_rows_up_to_its_limit_checkpoints_included() -> None:
    buffer = RowBuffer(limit=3)
    buffer.add_message(message(1))
    buffer.add_message(message(2))
    buffer.add_checkpoint(Position(1002, 2))
    buffer.add_message(message(3))
    assert len(buffer) == 3
    assert [buffer[index].text.split()[0] for index in range(3)] == ["2", "[CHECKPOINT", "3"]


def test_rows_keep_their_serial_while_older_rows_leave() -> None:
    buffer = RowBuffer(limit=2)
    first = buffer.add_message(message(1))
    second = buffer.add_message(message(2))
    assert buffer.index_of(second.serial) == 1
    buffer.add_message(message(3))
    assert buffer.index_of(first.serial) is None
    assert buffer.index_of(second.serial) == 0
    assert buffer.first_serial == second.serial


def test_the_default_limit_is_ten_thousand_rows() -> None:
    buffer = RowBuffer()
    for position in range(DEFAULT_ROW_LIMIT + 5):
        buffer.add_checkpoint(Position(position, position))
    assert len(buffer) == DEFAULT_ROW_LIMIT == 10_000
    assert buffer[0].checkpoint == Position(5, 5)


def test_a_row_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="row limit 0"):
        RowBuffer(limit=0)


def test_status_goes_from_catching_up_to_live() -> None:
    status = StreamStatus("orders", started_at=0.0)
    assert status.text(1.0, rows=0, row_limit=10).startswith("CATCHING UP · publication orders")
    status.live = True
    assert status.text(1.0, rows=0, row_limit=10).startswith("LIVE")


def test_rate_counts_the_last_five_seconds_only() -> None:
    status = StreamStatus("orders", started_at=0.0)
    wall = APPENDED + datetime.timedelta(seconds=2)
    for tenth in range(100):  # 10 messages a second for 10 seconds
        status.message_received(APPENDED, now=tenth / 10, wall_now=wall)
    assert status.rate(10.0) == pytest.approx(10.0)
    assert status.rate(20.0) == 0.0
    assert status.messages == 100


def test_rate_in_the_first_seconds_divides_by_the_time_elapsed() -> None:
    status = StreamStatus("orders", started_at=100.0)
    for _ in range(6):
        status.message_received(APPENDED, now=101.5, wall_now=APPENDED)
    assert status.rate(102.0) == pytest.approx(3.0)


def test_lag_is_the_newest_message_age_when_it_arrived() -> None:
    status = StreamStatus("orders", started_at=0.0)
    status.message_received(APPENDED, now=1.0, wall_now=APPENDED + datetime.timedelta(minutes=3))
    assert "lag 3m 00s" in status.text(1.0, rows=1, row_limit=10)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "0.25s"), (12.04, "12.0s"), (185, "3m 05s"), (7620, "2h 07m"), (-1, "0.00s")],
)
def test_durations_are_short(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_status_counts_and_rows() -> None:
    status = StreamStatus("orders", started_at=0.0)
    status.checkpoints = 2
    text = status.text(1.0, rows=1234, row_limit=10_000)
    assert "2 checkpoints" in text
    assert "rows 1,234/10,000" in text
