from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port another process could hold: bound and listening for the test's duration."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]
