"""The Textual app: a status bar, the rows, and the whole message of the selected row.

The app reads any async iterator of subscription events (`poller.subscribe` in the command,
the same over a test database in tests) and never decides anything itself: rows, the buffer
bound and the status text come from the pure modules beside it.
"""

import datetime
import time
from collections.abc import AsyncIterator, Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from outbox_cli.tail.buffer import DEFAULT_ROW_LIMIT, RowBuffer
from outbox_cli.tail.row_view import RowView
from outbox_cli.tail.rows import checkpoint_details, header_line, message_details
from outbox_cli.tail.status import StreamStatus
from poller import CaughtUp, Checkpoint, Message

Event = Message | CaughtUp | Checkpoint

# How often the status bar is redrawn when nothing arrives, so rate and lag stay current.
STATUS_REFRESH_SECONDS = 0.5


def _wall_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class TailApp(App[None]):
    TITLE = "outbox tail"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #status { dock: top; height: 1; background: $primary; color: $text; padding: 0 1; }
    #columns { height: 1; text-style: bold; padding: 0 0; }
    #details { dock: bottom; height: 60%; border-top: solid $primary; display: none;
               overflow-y: auto; padding: 0 1; }
    #details.shown { display: block; }
    """
    # Ctrl-C arrives as a key in Textual's raw mode, not as SIGINT; it quits as in any tail.
    BINDINGS = [  # noqa: RUF012 (Textual reads this class attribute as declared)
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("escape", "close_details", "Close message", show=False),
    ]

    def __init__(
        self,
        events: AsyncIterator[Event],
        publication: str,
        *,
        row_limit: int = DEFAULT_ROW_LIMIT,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime.datetime] = _wall_now,
    ) -> None:
        super().__init__()
        self._events = events
        self._clock = clock
        self._wall_clock = wall_clock
        self.buffer = RowBuffer(row_limit)
        self.status = StreamStatus(publication, started_at=clock())
        self.failure: BaseException | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield Static(Text(header_line()), id="columns")
        yield RowView(self.buffer, id="rows")
        yield Static(id="details")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(RowView).focus()
        self._show_status()
        self.set_interval(STATUS_REFRESH_SECONDS, self._show_status)
        self.run_worker(self._consume(), name="subscription", exit_on_error=False)

    async def _consume(self) -> None:
        view = self.query_one(RowView)
        try:
            async for event in self._events:
                self._take(event, view)
        except Exception as error:
            # Kept for the command to print as its one-line error after the screen is gone.
            self.failure = error
            self.status.failure = f"{type(error).__name__}: {error}"
            self.exit()
            return
        self.status.failure = "the subscription ended"
        self._show_status()

    def _take(self, event: Event, view: RowView) -> None:
        if isinstance(event, Message):
            self.status.message_received(event.appended_at, self._clock(), self._wall_clock())
            row = self.buffer.add_message(event)
        elif isinstance(event, Checkpoint):
            self.status.checkpoints += 1
            row = self.buffer.add_checkpoint(event.at)
        else:
            self.status.live = True
            self._show_status()
            return
        view.rows_added(len(row.text))

    def _show_status(self) -> None:
        text = self.status.text(self._clock(), len(self.buffer), self.buffer.limit)
        self.query_one("#status", Static).update(Text(text))

    def on_row_view_selected(self, selected: RowView.Selected) -> None:
        row = selected.row
        if row.message is not None:
            shown = message_details(row.message)
        else:
            assert row.checkpoint is not None  # a row holds a message or a checkpoint
            shown = checkpoint_details(row.checkpoint)
        details = self.query_one("#details", Static)
        details.update(Text(shown))
        details.add_class("shown")

    def action_close_details(self) -> None:
        self.query_one("#details", Static).remove_class("shown")
