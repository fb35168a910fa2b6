import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest

from tests.support.cli import outbox_command
from tests.support.databases import PROJECT_ROOT, DatabaseFactory


def test_migrate_creates_the_schema_and_is_idempotent(database_factory: DatabaseFactory) -> None:
    url = database_factory.create(migrated=False)
    try:
        for _ in range(2):
            done = outbox_command(["migrate"], url)
            assert done.returncode == 0, done.stderr
            assert "outbox schema at revision" in done.stdout
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT to_regclass('outbox.messages')").fetchone() == (
                "outbox.messages",
            )
        down = outbox_command(["migrate", "--downgrade"], url)
        assert down.returncode == 0, down.stderr
        assert "revision base" in down.stdout
    finally:
        database_factory.drop(url)


def test_db_url_masks_the_password() -> None:
    done = outbox_command(["db", "url"], "postgresql://app:hunter2@db.invalid:5432/app")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "postgresql://app:***@db.invalid:5432/app"


def test_without_a_url_the_embedded_database_is_started_and_reused(tmp_path: Path) -> None:
    # A short path: the server's Unix socket lives in the data directory.
    data_dir = Path("/tmp") / f"outbox-acc-{tmp_path.name[-12:]}"
    try:
        first = outbox_command(["db", "url"], None, OUTBOX_DATA_DIR=str(data_dir))
        assert first.returncode == 0, first.stderr
        assert (data_dir / "pgdata" / "PG_VERSION").exists()
        second = outbox_command(["migrate"], None, OUTBOX_DATA_DIR=str(data_dir))
        assert second.returncode == 0, second.stderr
        assert first.stdout.strip() in second.stderr  # the same server, logged by its URL
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_docker_compose_file_is_valid() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker client")
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    done = subprocess.run(
        ["docker", "compose", "-f", str(PROJECT_ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
