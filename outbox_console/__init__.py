"""The operator console: `outbox console` serves it in a browser."""
