"""Fixtures the service tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from token_store import KeyRing, SQLiteStore, Store


@pytest.fixture
async def store(tmp_path: Path, keyring: KeyRing) -> AsyncIterator[Store]:
    """A SQLite store under tmp_path."""
    opened = await SQLiteStore.open(tmp_path / "store.sqlite3", keyring)
    yield opened
    await opened.close()
