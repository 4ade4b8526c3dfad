"""service/ops/cli/keys.py: `keys rotate` re-seals under the newest key; `keys retire` refuses a key
that still seals a record, and the primary key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.ops.cli import main
from tests.support.cli import new_key, serve_environment
from token_store import Connection, ConnectionKey, KeyRing, SQLiteStore, TokenSet, UserRef


def test_keys_rotate_reencrypts_under_the_newest_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = f"old:{new_key()}", f"new:{new_key()}"
    db = tmp_path / "store.sqlite3"
    conn = Connection(
        ConnectionKey(UserRef("https://as", "alice"), "mockhub", "1"), TokenSet("tok"), "a", 1.0, 1.0
    )

    async def put_and_read(keys: str, write: bool) -> tuple[str | None, str | None]:
        store = await SQLiteStore.open(db, KeyRing.parse(keys))
        try:
            if write:
                await store.put_connection(conn)
            found = await store.get_connection(conn.key.user, "mockhub")
            return (found.tokens.access_token if found else None), None
        finally:
            await store.close()

    asyncio.run(put_and_read(old, write=True))
    serve_environment(monkeypatch, store_url=f"sqlite:///{db}", encryption_keys=f"{new},{old}")
    assert main(["keys", "rotate"]) == 0
    assert "re-encrypted 1 record" in capsys.readouterr().out
    # The old key is no longer needed: the record reads under the new key alone.
    assert asyncio.run(put_and_read(new, write=False))[0] == "tok"


def test_keys_retire_refuses_while_a_record_is_sealed_under_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = f"old:{new_key()}", f"new:{new_key()}"
    db = tmp_path / "store.sqlite3"
    users = [UserRef("https://as", sub) for sub in ("alice", "bob")]

    async def put_under_old() -> None:
        store = await SQLiteStore.open(db, KeyRing.parse(old))
        try:
            for user in users:
                await store.put_connection(
                    Connection(ConnectionKey(user, "mockhub", "1"), TokenSet("t"), "a", 1, 1)
                )
        finally:
            await store.close()

    asyncio.run(put_under_old())
    serve_environment(monkeypatch, store_url=f"sqlite:///{db}", encryption_keys=f"{new},{old}")
    assert main(["keys", "retire", "old"]) == 1
    assert "2 record(s) are sealed only under 'old'" in capsys.readouterr().err
    assert main(["keys", "retire", "new"]) == 1  # the primary key is never retired
    assert "primary" in capsys.readouterr().err
    assert main(["keys", "rotate"]) == 0
    assert main(["keys", "retire", "old"]) == 0
    assert "no record is sealed under 'old'" in capsys.readouterr().out
