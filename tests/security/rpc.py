"""A raw MCP client over httpx: exact control of headers, bearer and session id, for attacks the
SDK client would not send. Speaks 2025-11-25 (initialize, Mcp-Session-Id, SSE answers) and
2026-07-28 (stateless requests with `_meta`, `requestState` in params)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx

from tests.security.attack import Servers

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "attacker", "version": "1"}
CAPABILITIES: dict[str, Any] = {"elicitation": {"url": {}}}
ACCEPT = "application/json, text/event-stream"


def messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a JSON or SSE answer."""
    if "text/event-stream" in response.headers.get("content-type", ""):
        found = []
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                found.append(json.loads(line[5:]))
        return found
    if response.headers.get("content-type", "").startswith("application/json") and response.content:
        body = response.json()
        return body if isinstance(body, list) else [body]
    return []


class RawMcp:
    def __init__(
        self,
        servers: Servers,
        http: httpx.AsyncClient,
        mode: str,
        token: str | None,
        headers: dict[str, str] | None = None,
        capabilities: dict[str, Any] | None = None,
        client_info: dict[str, str] | None = None,
    ) -> None:
        self.servers = servers
        self.capabilities = CAPABILITIES if capabilities is None else capabilities
        self.client_info = client_info or CLIENT_INFO
        self.http = http
        self.mode = mode
        self.token = token
        self.headers = dict(headers or {})
        self.session_id: str | None = None
        self.last_status: int | None = None
        self._ids = itertools.count(1)

    def _headers(self, method: str, name: str | None) -> dict[str, str]:
        headers = {"Accept": ACCEPT, "Content-Type": "application/json", **self.headers}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.mode == "legacy":
            if self.session_id is not None:
                headers.setdefault("Mcp-Session-Id", self.session_id)
                headers["MCP-Protocol-Version"] = LEGACY_VERSION
        else:
            headers["MCP-Protocol-Version"] = MODERN_VERSION
            headers["Mcp-Method"] = method
            if name is not None:
                headers["Mcp-Name"] = name
        return headers

    async def send(
        self, method: str, params: dict[str, Any] | None = None, *, notify: bool = False
    ) -> httpx.Response:
        params = dict(params or {})
        if self.mode != "legacy":
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                "io.modelcontextprotocol/clientInfo": self.client_info,
                "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            }
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            body["id"] = next(self._ids)
        # json.dumps escapes non-ASCII (lone surrogates too), as many clients do; httpx's json= would not.
        return await self.http.post(
            self.servers.mcp_url, headers=self._headers(method, params.get("name")), content=json.dumps(body)
        )

    async def open(self) -> httpx.Response:
        """The first request of a client: `initialize` (legacy) or a tools/call of whoami (2026-07-28)."""
        if self.mode != "legacy":
            return await self.send("tools/call", {"name": "whoami", "arguments": {}})
        response = await self.send(
            "initialize",
            {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": self.capabilities,
                "clientInfo": self.client_info,
            },
        )
        if response.status_code == 200:
            self.session_id = response.headers.get("mcp-session-id")
            await self.send("notifications/initialized", notify=True)
        return response

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """tools/call; the JSON-RPC answer (result or error) as a dict."""
        response = await self.send("tools/call", {"name": name, "arguments": arguments or {}, **extra})
        # 2026-07-28 answers a request-level JSON-RPC error with HTTP 400 and the error as the body.
        assert response.status_code in (200, 400), (response.status_code, response.text[:300])
        [answer] = [m for m in messages(response) if "id" in m]
        self.last_status = response.status_code
        return answer


def connect_url(answer: dict[str, Any]) -> str:
    """The connect URL from a -32042 error or an InputRequiredResult."""
    if "error" in answer:
        return str(answer["error"]["data"]["elicitations"][0]["url"])
    [request] = answer["result"]["inputRequests"].values()
    return str(request["params"]["url"])
