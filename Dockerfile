# syntax=docker/dockerfile:1
# The `outbox` command (daemon, relays, operator's commands, the console), installed from the
# project's wheel as an application would install it: `pip install
# 'outbox-poller[cli,relays,console]'`, at the versions of uv.lock.
# tests/acceptance/test_installed_wheel.py builds the wheel from the files the COPY lines below
# copy (a package folder left out fails it) and installs it with the same extras (read from
# OUTBOX_EXTRAS below) into a fresh virtualenv, then runs the commands the compose file runs;
# tests/unit/test_deployment_commands.py checks those commands against the CLI.

ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ARG OUTBOX_EXTRAS=cli,relays,console
COPY --from=ghcr.io/astral-sh/uv:latest /uv /usr/local/bin/uv
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY outbox outbox
COPY poller poller
COPY outbox_relays outbox_relays
COPY outbox_spark outbox_spark
COPY outbox_cli outbox_cli
COPY outbox_console outbox_console
COPY sql sql
COPY migrations migrations
# The wheel, and the locked versions of what its extras install, as constraints: the install
# below takes only what the wheel declares, at the versions the tests ran with.
RUN uv build --wheel --out-dir /dist \
 && uv export --locked --no-dev --no-hashes --no-emit-project --no-header \
      $(echo "${OUTBOX_EXTRAS}" | tr ',' '\n' | sed 's/^/--extra=/') \
      --output-file /dist/constraints.txt

FROM ${PYTHON_IMAGE}
ARG OUTBOX_EXTRAS=cli,relays,console
ENV PATH="/opt/outbox/bin:$PATH" \
    PYTHONUNBUFFERED=1
RUN --mount=from=build,source=/dist,target=/dist \
    --mount=from=ghcr.io/astral-sh/uv:latest,source=/uv,target=/usr/local/bin/uv \
    uv venv --python /usr/local/bin/python3 --no-python-downloads /opt/outbox \
 && uv pip install --python /opt/outbox/bin/python --no-cache --compile-bytecode \
      --constraint /dist/constraints.txt "$(echo /dist/*.whl)[${OUTBOX_EXTRAS}]"
# Not root: the daemon needs no privilege, and a handler's bug should not get one. /app is where
# `outbox poll` finds handler modules (the current directory comes first on its import path).
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin outbox \
 && mkdir /app && chown outbox /app
USER outbox
WORKDIR /app
ENTRYPOINT ["outbox"]
CMD ["--help"]
