"""Slack's formats that MockSlack and its Web API stand-in share: scope lists and ids."""

from __future__ import annotations

import base64
import hashlib
import re

__all__ = ["slack_id", "split_scopes"]


def split_scopes(value: str | None) -> list[str]:
    """Slack scopes are comma-separated; spaces are tolerated too. Duplicates dropped."""
    return list(dict.fromkeys(part for part in re.split(r"[,\s]+", value or "") if part))


def slack_id(prefix: str, seed: str) -> str:
    """A stable Slack-style id (``U…``, ``B…``, ``A…``): prefix + 10 of [A-Z2-7]."""
    digest = hashlib.sha256(seed.encode("utf-8")).digest()
    return prefix + base64.b32encode(digest).decode("ascii")[:10]
