"""MockHub's accounts: a GitHub-style login and the stable id derived from it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

LOGIN_PATTERN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$")
LOGIN_RULE = "A MockHub login is 1-39 letters, digits or single hyphens, not starting or ending with one."


@dataclass(frozen=True)
class MockHubAccount:
    """A MockHub user. ``id`` is derived from the login, so it is stable everywhere."""

    id: int
    login: str
    name: str

    @classmethod
    def for_login(cls, login: str) -> MockHubAccount:
        digest = hashlib.sha256(login.lower().encode("utf-8")).digest()
        return cls(
            id=1000 + int.from_bytes(digest[:4], "big") % 90_000_000, login=login, name=f"{login} (MockHub)"
        )

    def get_user_id(self) -> int:
        return self.id
