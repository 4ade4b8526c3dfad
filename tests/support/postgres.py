"""A private PostgreSQL server for the tests: `initdb` in a temp dir, on a free loopback port.

The tests never use a PostgreSQL already running on the machine. The server refuses to run as
root, so under root it runs as `nobody` (through `setpriv`) in a directory that user owns. No
PostgreSQL binaries: the test skips locally and fails in CI (tests/needs.py).
"""

from __future__ import annotations

import uuid

from mock_providers.testing import store_servers
from tests.needs import HOW_TO_GET, skip_or_fail_in_ci

PG_HOST, SUPERUSER = store_servers.PG_HOST, store_servers.SUPERUSER


class PostgresServer(store_servers.PostgresServer):
    """store_servers.PostgresServer; skips, or fails in CI, without PostgreSQL's binaries."""

    def __init__(self) -> None:
        __tracebackhide__ = True
        try:
            super().__init__()
        except store_servers.MissingService as exc:
            skip_or_fail_in_ci(exc.what, HOW_TO_GET[exc.service])


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
