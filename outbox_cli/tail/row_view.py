"""The scrolling list of rows: Textual's Line API over the bounded RowBuffer.

Only the visible lines are rendered, straight from the deque, so adding a row or dropping the
oldest costs the same at 10 rows as at 10,000. The cursor is kept as a row serial, not an
index: indexes shift every time the oldest row leaves.
"""

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Size
from textual.message import Message as TextualMessage
from textual.scroll_view import ScrollView
from textual.strip import Strip

from outbox_cli.tail.buffer import RowBuffer
from outbox_cli.tail.rows import Row


class RowView(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    RowView {
        height: 1fr;
        background: $surface;
        /* Rows are cut to the screen; Enter shows the whole message. */
        overflow-x: hidden;
    }
    """

    BINDINGS = [  # noqa: RUF012 (Textual reads this class attribute as declared)
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "follow", "Follow"),
        Binding("enter", "select", "Show message"),
    ]

    class Selected(TextualMessage):
        def __init__(self, row: Row) -> None:
            super().__init__()
            self.row = row

    def __init__(self, buffer: RowBuffer, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.buffer = buffer
        self.cursor: int | None = None  # a serial; None follows the newest row
        self._width = 0
        self._dropped_seen = 0

    @property
    def following(self) -> bool:
        return self.cursor is None

    def rows_added(self, widest: int) -> None:
        """New rows are in the buffer (and maybe old ones gone): resize, keep the view."""
        dropped = self.buffer.first_serial - self._dropped_seen
        self._dropped_seen = self.buffer.first_serial
        self._width = max(self._width, widest)
        self.virtual_size = Size(self._width, len(self.buffer))
        if self.cursor is not None and self.buffer.index_of(self.cursor) is None:
            self.cursor = self.buffer.first_serial
        if self.following:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif dropped:
            # Rows left above the view: move up with them so the rows read stay in place.
            self.scroll_to(y=max(self.scroll_y - dropped, 0), animate=False, immediate=True)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self.buffer):
            return Strip.blank(width, base)
        row = self.buffer[index]
        style = base
        if row.message is None:
            style += Style(dim=True)
        if row.serial == self.cursor:
            style += Style(reverse=True)
        text = row.text.ljust(width + scroll_x)
        strip = Strip([Segment(text, style)])
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _move_cursor_to(self, index: int) -> None:
        if not len(self.buffer):
            return
        index = min(max(index, 0), len(self.buffer) - 1)
        self.cursor = self.buffer[index].serial
        self.scroll_to_region_of(index)
        self.refresh()

    def scroll_to_region_of(self, index: int) -> None:
        top = self.scroll_y
        height = self.scrollable_content_region.height
        if index < top:
            self.scroll_to(y=index, animate=False, immediate=True)
        elif index >= top + height:
            self.scroll_to(y=index - height + 1, animate=False, immediate=True)

    def _cursor_index(self) -> int:
        if self.cursor is None:
            return len(self.buffer) - 1
        index = self.buffer.index_of(self.cursor)
        return 0 if index is None else index

    def action_cursor(self, step: int) -> None:
        self._move_cursor_to(self._cursor_index() + step)

    def action_page(self, direction: int) -> None:
        page = self.scrollable_content_region.height
        self._move_cursor_to(self._cursor_index() + direction * page)

    def action_first(self) -> None:
        self._move_cursor_to(0)

    def action_follow(self) -> None:
        """Back to the newest row, following new ones again."""
        self.cursor = None
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def action_select(self) -> None:
        if not len(self.buffer):
            return
        if self.cursor is None:
            self._move_cursor_to(len(self.buffer) - 1)
        index = self._cursor_index()
        self.post_message(self.Selected(self.buffer[index]))

    def on_click(self, event: Click) -> None:
        index = self.scroll_offset.y + event.y
        if 0 <= index < len(self.buffer):
            self._move_cursor_to(index)
            self.post_message(self.Selected(self.buffer[index]))
