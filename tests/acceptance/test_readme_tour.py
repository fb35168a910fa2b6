"""The README's five-minute tour, run as a newcomer runs it, in order: every shell line in a
shell, every Python block as the application (or the handler file its first line names), `outbox
poll` left running while the commands after it run, then stopped as Ctrl-C would."""

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.cli import outbox_environment
from tests.support.daemons import wait_until
from tests.support.databases import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
TOUR_HEADING = "## A five-minute tour"
BLOCK = re.compile(r"```(sh|python)\n(.*?)```", re.S)
FILE_NAME = re.compile(r"# ([\w/]+\.py)\n")


def tour() -> list[tuple[str, str]]:
    """The tour's code blocks, in order: (language, text)."""
    text = README.read_text()
    assert TOUR_HEADING in text, (
        f"README.md has no {TOUR_HEADING!r} section: it opens the README, before the reference"
        " (the text is in the operators branch's notes)"
    )
    section = text[text.index(TOUR_HEADING) :]
    section = section[: section.find("\n## ", len(TOUR_HEADING))]
    return BLOCK.findall(section)


def test_the_five_minute_tour_runs_as_written(database_url: str, tmp_path: Path) -> None:
    environment = outbox_environment(None)
    # `outbox` as installed, found on PATH as a reader's shell finds it.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    environment["PYTHONUNBUFFERED"] = "1"  # the handler's print, at once, as on a terminal
    daemon: subprocess.Popen[bytes] | None = None
    log = tmp_path / "poll.log"
    try:
        for language, text in tour():
            if language == "python":
                if named := FILE_NAME.match(text):
                    (tmp_path / named[1]).write_text(text)  # the handler module, as saved
                else:
                    run([sys.executable, "-c", text], environment, tmp_path)
                continue
            for line in text.splitlines():
                words = shlex.split(line, comments=True)
                if not words:
                    continue
                if words[0] == "export":
                    name, _, value = words[1].partition("=")
                    # The tour's URL is an example; the test's database stands in for it.
                    environment[name] = database_url if name == "OUTBOX_DATABASE_URL" else value
                elif words[:2] == ["outbox", "poll"]:
                    with log.open("wb") as output:
                        daemon = subprocess.Popen(
                            words,
                            stdout=output,
                            stderr=subprocess.STDOUT,
                            env=environment,
                            cwd=tmp_path,
                        )
                    wait_until(lambda: "OrderPlaced" in log.read_text(), 60, "the handler's line")
                else:
                    run(["bash", "-c", line], environment, tmp_path)
        assert daemon is not None, "the tour runs `outbox poll`"
        daemon.send_signal(signal.SIGINT)  # Ctrl-C
        assert daemon.wait(timeout=30) == 0, log.read_text()
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def run(command: list[str], environment: dict[str, str], cwd: Path) -> None:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}{done.stderr}"
