# The two commands a fresh clone needs: `make demo` and `make test`.
# uv on PATH, else the one pip installs (`python3 -m uv` finds it in the user or global site).
UV ?= $(shell command -v uv 2>/dev/null || echo python3 -m uv)
PYTEST_ARGS ?=

.PHONY: demo test test-fast install lint docs bench uv tools

uv:
	@$(UV) --version >/dev/null 2>&1 || python3 -m pip install --user --quiet uv

# Bytecode compiled at install: uv leaves it to the first import, and where
# PYTHONDONTWRITEBYTECODE is set none is ever cached, so every process (each `outbox` command,
# daemon, Spark's Python workers and its reader process per streaming query) compiled pyspark,
# psycopg and pydantic from source again: 0.9-1.4 s to import Spark's stream reader, 0.4-0.7 s
# with bytecode. About 11 s once; later runs only check timestamps.
install: uv
	$(UV) sync --locked --all-extras --compile-bytecode

# Debian's packages the tests drive, installed only where missing and apt-get runs as root (CI
# does this); elsewhere, say what to install. Without them those tests skip, saying so.
# - promtool and prometheus (`prometheus`), for the alert rules' tests
#   (tests/acceptance/test_alert_rules.py, test_prometheus_monitoring.py). The package's service
#   is not started: its maintainer script asks policy-rc.d, and the tests run a Prometheus of
#   their own on a free port.
# - chromium and chromedriver (`chromium`, `chromium-driver`), for the console's browser tests
#   (tests/acceptance/console/): Selenium drives Debian's browser, nothing is downloaded.
# - PostgreSQL's JDBC driver (`libpostgresql-jdbc-java`, a jar, not a command), the baseline
#   of `make bench BENCH_ARGS=spark` and `BENCH_ARGS=archive` (the benches look for it at that
#   path).
TOOLS = promtool:prometheus prometheus:prometheus chromium:chromium chromedriver:chromium-driver
TOOL_FILES = /usr/share/java/postgresql.jar:libpostgresql-jdbc-java

tools:
	@missing=$$( (for tool in $(TOOLS); do \
	  command -v $${tool%%:*} >/dev/null 2>&1 || echo $${tool#*:}; done; \
	  for file in $(TOOL_FILES); do \
	  [ -e $${file%%:*} ] || echo $${file#*:}; done) | sort -u | tr '\n' ' '); \
	if [ -z "$$missing" ]; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else \
	  echo "missing Debian packages: $$missing(as root: apt-get install" \
	    "--no-install-recommends $$missing); the tests that need them skip until then"; \
	fi

demo: install
	$(UV) run --locked outbox demo

lint: install
	$(UV) run --locked ruff check .
	$(UV) run --locked ruff format --check .
	$(UV) run --locked mypy
	$(UV) run --locked lint-imports

# The documentation site (mkdocs.yml) into site/, strictly: a broken link or anchor, a missing
# snippet of the README, or a page left out of the nav fails the build (and so `make test`).
# NO_MKDOCS_2_WARNING quiets Material's banner about MkDocs 2.
docs: install
	NO_MKDOCS_2_WARNING=1 $(UV) run --locked mkdocs build --strict --quiet

test: tools lint docs
	$(UV) run --locked pytest $(PYTEST_ARGS)

# The everyday loop: no process-killing fault tests, no Spark.
test-fast: install
	$(UV) run --locked pytest -m "not slow and not spark" $(PYTEST_ARGS)

# Every group, or those named: `make bench BENCH_ARGS=shards` runs bench/shards_bench.py alone
# (OUTBOX_BENCH_SHARDS_MESSAGES=10000 shrinks its drains for a smoke run).
BENCH_ARGS ?=

bench: install
	$(UV) run --locked python -m bench $(BENCH_ARGS)
