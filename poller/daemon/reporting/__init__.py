"""What the daemon reports: metrics and their HTTP server, spans, the failure log."""
