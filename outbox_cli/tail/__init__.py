"""`outbox tail`: a live view of one publication, on a terminal (Textual) or as plain lines.

The pure parts (rows, the bounded buffer, the status line) are kept apart from the widgets so
they are tested without a screen; the app only wires a subscription's events to them.
"""
