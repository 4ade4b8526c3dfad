"""A client that declares form-mode elicitation only, as most MCP clients in use do.

The SDK's client declares both modes whenever it has an elicitation callback, and has no option
to declare fewer. This transport rewrites what it declares on the wire, where a real client's
capabilities are: `initialize`'s `params.capabilities` on 2025-11-25, and each request's
`_meta["io.modelcontextprotocol/clientCapabilities"]` on 2026-07-28 (client-elicitation.mdx,
"Capabilities": an empty or form-only `elicitation` means no URL mode). Everything else is sent
as the SDK wrote it.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
from mcp_types import CLIENT_CAPABILITIES_META_KEY


class DeclaredElicitation(httpx2.AsyncBaseTransport):
    """Sends `elicitation` as the client's `capabilities.elicitation`, over `inner`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, elicitation: dict[str, Any]) -> None:
        self.inner = inner
        self.elicitation = elicitation

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "POST" and request.headers.get("content-type", "").startswith(
            "application/json"
        ):
            message = json.loads(await request.aread())
            if isinstance(message, dict) and self._declare(message):
                headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
                request = httpx2.Request(
                    request.method,
                    request.url,
                    headers=headers,
                    content=json.dumps(message).encode(),
                    extensions=request.extensions,
                )
        return await self.inner.handle_async_request(request)

    def _declare(self, message: dict[str, Any]) -> bool:
        params = message.get("params")
        if not isinstance(params, dict):
            return False
        declared = []
        if message.get("method") == "initialize" and isinstance(params.get("capabilities"), dict):
            declared.append(params["capabilities"])
        meta = params.get("_meta")
        if isinstance(meta, dict) and isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), dict):
            declared.append(meta[CLIENT_CAPABILITIES_META_KEY])
        for capabilities in declared:
            capabilities["elicitation"] = self.elicitation
        return bool(declared)

    async def aclose(self) -> None:
        await self.inner.aclose()
