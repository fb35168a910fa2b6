"""Catch-up subscriptions for consumers that keep their own position: a stream from a chosen
start, CaughtUp, then live messages with Checkpoint signals (see docs/explanation/catch-up.md)."""
