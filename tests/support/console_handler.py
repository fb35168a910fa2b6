"""A handler for the console's browser tests: records each delivery (as
tests.support.recording_handler does), but fails every message whose type the test put in
the table `refused_types`, so it parks (with max_retry_count 1) until the test lets it pass."""

from poller.message import Message
from tests.support.recording_handler import record, thread_connection


def record_unless_refused(message: Message) -> None:
    refused = thread_connection().execute(
        "SELECT 1 FROM refused_types WHERE message_type = %s", (message.message_type,)
    )
    if refused.fetchone() is not None:
        raise RuntimeError(f"refused by the test: {message.message_type} is in refused_types")
    record(message)
