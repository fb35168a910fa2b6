"""A Spark standalone cluster on this machine: a master and workers as separate processes.

Started from the pyspark distribution the project installs (`spark-class ...Master` and
`...Worker`), bound to 127.0.0.1, each worker with a work directory of its own, and small: the
test machine is shared. Every daemon runs in a process group of its own, so stopping a worker
also ends the executor JVMs and Python workers it started (Java starts them in its own group).
Each daemon also gets SIGKILL from the kernel if the test process dies first
(PR_SET_PDEATHSIG), so an interrupted run leaks no JVM.
"""

import contextlib
import ctypes
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home

PROJECT_ROOT = Path(__file__).resolve().parents[3]
SPARK_HOME = Path(_find_spark_home())
WORKER_CORES = 1
WORKER_MEMORY = "1g"
# Each daemon's own heap (spark-class reads SPARK_DAEMON_MEMORY); its default is 1g.
DAEMON_MEMORY = "256m"
# The settings an application needs to fit the workers above.
APPLICATION_CONFIG = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": str(WORKER_CORES),
    "spark.driver.memory": "512m",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
}
_PR_SET_PDEATHSIG = 1
# Loaded here: a child between fork and exec must not load libraries (it may take locks).
_LIBC = ctypes.CDLL(None, use_errno=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def die_with_parent() -> None:
    """Run in the child before exec: SIGKILL when the test process ends, however it ends."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def daemon_environment(extra: Mapping[str, str] = {}) -> dict[str, str]:
    environment = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # Executors start Python workers with this interpreter, which has the project installed;
        # the test doubles live in tests/, importable from the project root.
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    environment.update(extra)
    return environment


def stop_group(process: "subprocess.Popen[bytes]", grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL whatever is left after `grace` seconds."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    # The leader may be gone while its children (executors, Python workers) still run.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def start_daemon(
    arguments: list[str], log: Path, environment: Mapping[str, str]
) -> "subprocess.Popen[bytes]":
    with log.open("ab") as output:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *arguments],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(environment),
            start_new_session=True,  # a process group of its own, shared with its executors
            preexec_fn=die_with_parent,
        )


@dataclasses.dataclass
class StandaloneCluster:
    directory: Path
    master_port: int = dataclasses.field(default_factory=free_port)
    master_ui_port: int = dataclasses.field(default_factory=free_port)
    master: "subprocess.Popen[bytes] | None" = None
    workers: dict[str, "subprocess.Popen[bytes]"] = dataclasses.field(default_factory=dict)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def log_directory(self) -> Path:
        return self.directory / "logs"

    def work_directory(self, worker: str) -> Path:
        return self.directory / worker / "work"

    def start(self, worker_names: tuple[str, ...] = ("worker-1", "worker-2")) -> None:
        self.log_directory.mkdir(parents=True, exist_ok=True)
        self.master = start_daemon(
            [
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(self.master_port)),
                *("--webui-port", str(self.master_ui_port)),
            ],
            self.log_directory / "master.log",
            # A worker that stops heartbeating is dropped after 15 s, not the default 60 s.
            daemon_environment({"SPARK_MASTER_OPTS": "-Dspark.worker.timeout=15"}),
        )
        for name in worker_names:
            self.start_worker(name)
        self.wait_for_workers(len(worker_names))

    def start_worker(self, name: str) -> None:
        work = self.work_directory(name)
        work.mkdir(parents=True, exist_ok=True)
        self.workers[name] = start_daemon(
            [
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                *("--host", "127.0.0.1", "--webui-port", str(free_port())),
                *("--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY),
                *("--work-dir", str(work)),
            ],
            self.log_directory / f"{name}.log",
            # Spark's scratch space (shuffle, blocks) inside the worker's directory too.
            daemon_environment({"SPARK_LOCAL_DIRS": str(work.parent / "local")}),
        )

    def master_state(self) -> dict[str, object]:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.master_ui_port}/json/", timeout=5
        ) as response:
            state: dict[str, object] = json.load(response)
        return state

    def wait_for_workers(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"the master exited; see {self.log_directory / 'master.log'}")
            with contextlib.suppress(OSError, ValueError):
                if self.master_state().get("aliveworkers") == count:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not register in {timeout} s")
            time.sleep(0.5)

    def kill_worker(self, name: str, *also: int) -> None:
        """SIGKILL the worker, its executors and `also` (their Python workers, which PySpark's
        daemon moves to groups of their own): a host that dies."""
        process = self.workers.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in also:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()

    def worker_running(self, pid: int) -> str:
        """The worker that `pid` descends from (an executor's Python worker, say).

        Found through the parent chain: PySpark's daemon puts its workers in groups of their own.
        """
        by_pid = {process.pid: name for name, process in self.workers.items()}
        ancestor = pid
        while ancestor > 1:
            if ancestor in by_pid:
                return by_pid[ancestor]
            # /proc/PID/stat: "pid (command) state ppid ..."; the command may hold spaces.
            stat = Path(f"/proc/{ancestor}/stat").read_text()
            ancestor = int(stat.rsplit(")", 1)[1].split()[1])
        raise LookupError(f"process {pid} descends from no worker of this cluster")

    def submit(
        self,
        arguments: list[str],
        log: Path,
        config: Mapping[str, str] = {},
        environment: Mapping[str, str] = {},
    ) -> "subprocess.Popen[bytes]":
        """spark-submit to this cluster (client mode: the driver runs here, in its own group)."""
        settings = {**APPLICATION_CONFIG, **config}
        command = [
            str(SPARK_HOME / "bin" / "spark-submit"),
            *("--master", self.master_url),
            *(part for key, value in settings.items() for part in ("--conf", f"{key}={value}")),
            *arguments,
        ]
        with log.open("ab") as output:
            return subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=daemon_environment({"PYSPARK_DRIVER_PYTHON": sys.executable, **environment}),
                cwd=PROJECT_ROOT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def stop(self) -> None:
        for name in list(self.workers):
            stop_group(self.workers.pop(name))
        if self.master is not None:
            stop_group(self.master)
            self.master = None


@contextlib.contextmanager
def standalone_cluster(directory: Path) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(directory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
