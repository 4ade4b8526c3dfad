"""No token, code, state, cookie or client secret in any log line, at DEBUG, through the real handler."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from mcp.shared.exceptions import MCPError

from mock_providers import mint_access_token
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import mcp_client
from mock_providers.testing.servers import DemoServers
from service.observability.redaction import RedactingFilter

pytestmark = pytest.mark.e2e


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.addFilter(RedactingFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def captured_logs() -> Iterator[ListHandler]:
    handler = ListHandler()
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield handler
    root.removeHandler(handler)
    root.setLevel(previous)


async def test_full_flow_logs_no_secret(
    servers: DemoServers, browser: Browser, captured_logs: ListHandler
) -> None:
    async def open_in_browser(params: object) -> str:
        await browser.complete_connect(params.url, username="alice")  # type: ignore[attr-defined]
        return "accept"

    async with mcp_client(servers, "alice", "2026-07-28", on_url=open_in_browser) as (client, _):
        assert not (await client.call_tool("whoami", {})).is_error
    async with mcp_client(servers, "bob", "legacy", on_url=open_in_browser) as (client, _):
        with pytest.raises(MCPError):
            await client.call_tool("whoami", {})

    secrets: set[str] = set(servers.mockhub.issued_access_tokens) | set(servers.mockhub.issued_refresh_tokens)
    for url in browser.visited:
        query = parse_qs(urlsplit(url).query)
        for name in ("code", "state", "elicitationId"):
            secrets.update(query.get(name, []))
    secrets.update(json.loads((servers.data_dir / "demo-secrets.json").read_text()).values())
    secrets.update(c.value for c in browser.http.cookies.jar if c.value)
    secrets.add(mint_access_token(servers.data_dir, "alice"))
    assert len(secrets) > 8

    text = "\n".join(captured_logs.lines)
    assert "GET /callback?" in text or "/callback" in text, "the access log should have been captured"
    leaks = [
        line.replace(secret, "<" + secret[:4] + "…>")[:300]
        for line in captured_logs.lines
        for secret in secrets
        if len(secret) >= 8 and secret in line
    ]
    assert leaks == [], "secrets found in logs:\n" + "\n".join(leaks)
