"""What one message or checkpoint looks like as a row, a plain line and a detail view.

Every value that came from a writer (type, key, data, headers) passes through `escaped`, so a
message cannot drive the operator's terminal or break the row layout with a newline.
"""

from dataclasses import dataclass

import orjson

from outbox.positions import Position
from outbox_cli.printing import escaped
from poller.message import Message

# Column widths of a message row; the data gets what is left of the line, cut to DATA_CUT.
POSITION_WIDTH = 12
TRANSACTION_WIDTH = 12
TYPE_WIDTH = 24
KEY_WIDTH = 16
DATA_CUT = 80
NO_KEY = "-"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the view. `serial` counts every row ever added, so a row keeps its identity
    (for the cursor) while older rows leave the bounded buffer."""

    serial: int
    text: str
    message: Message | None  # None: a checkpoint row
    checkpoint: Position | None = None


def cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, an ellipsis marking the cut."""
    if len(text) <= width:
        return text
    return text[: width - 1] + "…"


def _column(value: object, width: int) -> str:
    return cut(escaped(value), width).ljust(width)


def header_line() -> str:
    return "".join(
        (
            "position".ljust(POSITION_WIDTH),
            "transaction".ljust(TRANSACTION_WIDTH),
            "type".ljust(TYPE_WIDTH),
            "key".ljust(KEY_WIDTH),
            "data",
        )
    )


def message_line(message: Message) -> str:
    """position, transaction id, type, partition key and the start of the data."""
    key = NO_KEY if message.partition_key is None else message.partition_key
    return "".join(
        (
            _column(message.position, POSITION_WIDTH),
            _column(message.transaction_id, TRANSACTION_WIDTH),
            _column(message.message_type, TYPE_WIDTH),
            _column(key, KEY_WIDTH),
            cut(escaped(message.data_text), DATA_CUT),
        )
    )


def checkpoint_line(at: Position) -> str:
    return f"[CHECKPOINT tx={at.transaction_id} pos={at.position}]"


CAUGHT_UP_LINE = "[CAUGHT UP]"


def plain_line(message: Message) -> str:
    """One line for pipes: tab-separated, the data whole (JSON text holds no raw newline)."""
    key = NO_KEY if message.partition_key is None else message.partition_key
    fields = (message.at, message.message_type, key, message.data_text)
    return "\t".join(escaped(field) for field in fields)


def _pretty_json(value: object) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def message_details(message: Message) -> str:
    """The whole message, every field, data and headers indented, for the detail pane."""
    key = NO_KEY if message.partition_key is None else message.partition_key
    lines = [
        f"position       {message.at} (resume after it: --from {message.at})",
        f"publication    {escaped(message.publication)}",
        f"message id     {escaped(message.message_id)}",
        f"type           {escaped(message.message_type)}",
        f"partition key  {escaped(key)}",
        f"appended at    {message.appended_at.isoformat()}",
        "headers",
        *(escaped(line) for line in _pretty_json(message.headers).splitlines()),
        "data",
        *(escaped(line) for line in _pretty_json(message.data).splitlines()),
    ]
    return "\n".join(lines)


def checkpoint_details(at: Position) -> str:
    return (
        f"checkpoint {at}: every message up to it has been shown or skipped by the filter;\n"
        f"`outbox tail --from {at}` shows exactly the messages after it."
    )
