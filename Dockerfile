FROM python:3.12-slim
COPY --from=ghcr.io/astral-sh/uv:latest /uv /usr/local/bin/uv
WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
COPY outbox outbox
COPY poller poller
COPY pipeline pipeline
COPY outbox_cli outbox_cli
COPY outbox_relays outbox_relays
COPY sql sql
COPY migrations migrations
RUN uv sync --locked --no-dev
ENV PATH="/app/.venv/bin:$PATH"
ENTRYPOINT ["outbox"]
CMD ["--help"]
