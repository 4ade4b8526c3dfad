"""A private PostgreSQL server for the tests: `initdb` in a temp dir, on a free loopback port.

The tests never use a PostgreSQL already running on the machine. The server refuses to run as
root, so under root it runs as `nobody` (through `setpriv`) in a directory that user owns. No
PostgreSQL binaries: the test skips locally and fails in CI (tests/needs.py).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from tests.needs import HOW_TO_GET, REDIS_HOST, free_port, skip_or_fail_in_ci

PG_HOST = REDIS_HOST  # loopback only
SUPERUSER = "mcpuc_admin"
START_SECONDS = 30.0


def postgres_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/<ver>/bin with an initdb (Debian's layout), else PATH's."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresServer:
    """`with PostgresServer() as pg:` a started server; `pg.url(database)` to reach it."""

    def __init__(self) -> None:
        __tracebackhide__ = True
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            skip_or_fail_in_ci("PostgreSQL (initdb)", HOW_TO_GET["postgresql"])
        self.bin_dir = bin_dir
        self.port = free_port()
        # Not under pytest's tmp dirs: those are 0700 root-owned, which `nobody` cannot enter.
        self.root = Path(tempfile.mkdtemp(prefix="mcpuc-pg-"))
        self.data = self.root / "data"
        self.password = "admin-" + os.urandom(8).hex()
        self.process: subprocess.Popen[bytes] | None = None

    def _as_owner(self, *command: str) -> list[str]:
        if os.geteuid() != 0:
            return list(command)
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]

    def url(self, database: str = "postgres", user: str = SUPERUSER, password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"postgresql://{quote(user)}:{quote(secret)}@{PG_HOST}:{self.port}/{quote(database)}"

    def start(self) -> PostgresServer:
        """Start the server (again, on the same port and data, after `stop(keep_data=True)`)."""
        if not self.data.exists():
            self._initdb()
        self._run_server()
        return self

    def _initdb(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.root, "nobody", "nogroup")
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "nobody", "nogroup")
        subprocess.run(
            self._as_owner(
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
        )
        pwfile.unlink()

    def _run_server(self) -> None:
        log = (self.root / "postgres.log").open("ab")
        self.process = subprocess.Popen(
            self._as_owner(
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.data),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={PG_HOST}",
                "-c",
                f"unix_socket_directories={self.root}",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + START_SECONDS
        while not self._accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"postgres did not start: {tail}")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        result = subprocess.run(
            [str(self.bin_dir / "pg_isready"), "-h", PG_HOST, "-p", str(self.port), "-t", "1"],
            capture_output=True,
        )
        return result.returncode == 0

    def log_tail(self) -> str:
        path = self.root / "postgres.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` as the superuser; its output (unaligned, tuples only)."""
        result = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
                self.url(database),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop the server (a fast shutdown); its files go too unless `keep_data`."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if not keep_data:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class PostgresSchema:
    """A schema no other test uses, in the private server's database; dropped afterwards. Its
    `url` puts the schema first on the search path, so a store opened on it sees only its tables."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.name = f"t_{uuid.uuid4().hex[:16]}"
        self.url = f"{server.url()}?search_path={self.name}"

    def __enter__(self) -> PostgresSchema:
        self.server.psql(f"CREATE SCHEMA {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.psql(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")


def terminate_clients(server: PostgresServer) -> None:
    """Cut every client connection to the server but psql's own, as a restart or a network
    failure would."""
    server.psql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
    )
