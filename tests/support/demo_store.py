"""Reading a running demo's SQLite store directly, as the e2e tests check what was stored."""

from __future__ import annotations

import sqlite3

from mock_providers.testing.servers import DemoServers


def connection_rows(servers: DemoServers) -> list[tuple[str, str, str]]:
    with sqlite3.connect(servers.store_file) as db:
        return list(db.execute("SELECT sub, provider, account FROM connections"))
