"""A remote MCP server protected by OAuth, for trying a gateway configuration (docs/gateway.md).

`McpDownstream` is the MCP Python SDK's own server with the SDK's own authorization server
routes in front of it (same origin): RFC 9728 protected-resource metadata, RFC 8414 metadata,
PKCE S256, RFC 7591 registration, Client ID Metadata Documents, RFC 8707 resource-bound tokens,
RFC 9207 `iss`, and a consent page where the user names their account there (`login`). Its tools:

| tool | does |
|---|---|
| `echo(text)` | returns `text` |
| `whoami()` | the account the token is for, and its scopes |
| `add(a, b)` | `a + b`, as structured content |
| `fail(message)` | a tool error carrying `message` |
| `huge(size)` | `size` characters of text (size bounds) |
| `slow(seconds)` | answers after `seconds` (deadlines) |
| `page()` | an HTML document as an embedded resource (never rendered as HTML by a gateway) |
| `admin_reset()` | needs the `admin` scope: without it, HTTP 403 `insufficient_scope` (step-up) |

Knobs (attributes, changed by a test while it runs): `metadata_mode` (what the metadata says, see
`MetadataMode`), `challenge_scope` (the `scope` of the 401 challenge), `cimd_supported`, and on
`authorization` (`StandInAuthorization`): `iss_mode`, `audience`, `access_token_lifetime`.
Records: `calls` (tool, account), `request_headers` (every MCP request's headers), `revoked`.
"""

from __future__ import annotations

import base64
import html
import json
import time
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import unquote

import anyio
import httpx
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AuthorizeError
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import EmbeddedResource, TextResourceContents
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mock_providers.providers.mcp_downstream.authorization import StandInAuthorization

# What the metadata says: "ok"; "resource_mismatch" (protected-resource metadata for another
# resource); "foreign_metadata" (the 401 names metadata on another origin); "no_s256" (no PKCE
# advertised); "other_resource" (the authorization server serves another resource only);
# "issuer_mismatch" (its metadata names another issuer).
MetadataMode = Literal[
    "ok", "resource_mismatch", "foreign_metadata", "no_s256", "other_resource", "issuer_mismatch"
]
ADMIN_SCOPE = "admin"
SCOPED_TOOLS = {"admin_reset": ADMIN_SCOPE}  # tools the token needs one more scope for
MAX_HUGE = 64 * 1024 * 1024


async def fetch_document(url: str) -> dict[str, Any] | None:
    """A Client ID Metadata Document, fetched as an authorization server does (no redirects)."""
    try:
        async with httpx.AsyncClient(timeout=5, follow_redirects=False) as http:
            response = await http.get(url, headers={"Accept": "application/json"})
        document = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return document if isinstance(document, dict) else None


class McpDownstream:
    def __init__(
        self,
        base_url: str,
        *,
        name: str = "Downstream",
        scopes: tuple[str, ...] = ("read",),
        fetch: Callable[[str], Any] = fetch_document,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/mcp"
        self.issuer = self.base_url
        self.name = name
        self.scopes = scopes
        self.metadata_mode: MetadataMode = "ok"
        self.challenge_scope: tuple[str, ...] | None = scopes
        self.cimd_supported = True
        self.calls: list[tuple[str, str | None]] = []
        self.request_headers: list[dict[str, str]] = []
        self.revoked: list[str] = []
        self.authorization = StandInAuthorization(
            issuer=self.issuer, resource=self.url, fetch_document=fetch, scopes=scopes, clock=clock
        )
        self.server = self._mcp_server()
        self.app = self._app()

    # ---- the MCP server -------------------------------------------------------------------------

    def _mcp_server(self) -> MCPServer[Any]:
        server: MCPServer[Any] = MCPServer(
            self.name,
            auth_server_provider=self.authorization,  # type: ignore[arg-type]
            auth=AuthSettings(
                issuer_url=self.issuer,  # type: ignore[arg-type]
                resource_server_url=self.url,  # type: ignore[arg-type]
                client_registration_options=ClientRegistrationOptions(
                    enabled=True, valid_scopes=[*self.scopes, ADMIN_SCOPE], default_scopes=list(self.scopes)
                ),
                revocation_options=RevocationOptions(enabled=True),
                validate_token_resource=True,
            ),
        )
        calls = self.calls

        def account() -> str | None:
            token = get_access_token()
            return token.subject if token else None

        @server.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            calls.append(("echo", account()))
            return text

        @server.tool(description="The account this server knows the caller as, and the token's scopes.")
        def whoami() -> dict[str, Any]:
            token = get_access_token()
            calls.append(("whoami", account()))
            return {"sub": account(), "scopes": sorted(token.scopes) if token else []}

        @server.tool(description="Add two integers.")
        def add(a: int, b: int) -> int:
            calls.append(("add", account()))
            return a + b

        @server.tool(description="Fail as a tool, with this message.")
        def fail(message: str) -> str:
            calls.append(("fail", account()))
            raise ToolError(message)

        @server.tool(description="Answer with this many characters.")
        def huge(size: int) -> str:
            calls.append(("huge", account()))
            return "x" * max(0, min(size, MAX_HUGE))

        @server.tool(description="Answer after this many seconds.")
        async def slow(seconds: float) -> str:
            calls.append(("slow", account()))
            await anyio.sleep(seconds)
            return "done"

        @server.tool(description="An HTML document, as an embedded resource.")
        def page() -> EmbeddedResource:
            calls.append(("page", account()))
            body = "<script>alert(document.cookie)</script><h1>hello</h1>"
            return EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="https://downstream.example/page", mime_type="text/html", text=body
                ),
            )

        @server.tool(description="Reset everything (needs the admin scope).")
        def admin_reset() -> str:
            calls.append(("admin_reset", account()))
            return "reset"

        return server

    # ---- HTTP -------------------------------------------------------------------------------------

    def _app(self) -> Starlette:
        mcp_app = self.server.streamable_http_app(
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        app = Starlette(
            routes=[
                Route("/.well-known/oauth-protected-resource/mcp", self._resource_metadata, methods=["GET"]),
                Route("/.well-known/oauth-authorization-server", self._server_metadata, methods=["GET"]),
                Route("/consent", self._consent, methods=["GET", "POST"]),
                Route("/revoke", self._revoke, methods=["POST"]),
                Mount("/", app=_Challenges(mcp_app, self)),
            ],
            lifespan=lambda app: self.server.session_manager.run(),
        )
        return app

    async def _resource_metadata(self, request: Request) -> Response:
        resource = "https://another.example/mcp" if self.metadata_mode == "resource_mismatch" else self.url
        document: dict[str, Any] = {
            "resource": resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        }
        if self.challenge_scope is not None:
            document["scopes_supported"] = list(self.scopes)
        return JSONResponse(document)

    async def _server_metadata(self, request: Request) -> Response:
        base = self.issuer
        metadata: dict[str, Any] = {
            "issuer": "https://another-issuer.example" if self.metadata_mode == "issuer_mismatch" else base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "registration_endpoint": f"{base}/register",
            "revocation_endpoint": f"{base}/revoke",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
            "scopes_supported": [*self.scopes, ADMIN_SCOPE],
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": self.cimd_supported,
        }
        if self.metadata_mode != "no_s256":
            metadata["code_challenge_methods_supported"] = ["S256"]
        if self.metadata_mode == "other_resource":
            metadata["protected_resources"] = ["https://another.example/mcp"]
        return JSONResponse(metadata)

    async def _revoke(self, request: Request) -> Response:
        """RFC 7009 with either client authentication (the SDK's own handler takes the secret in
        the body only): the client's own tokens are revoked; 200 whatever the token was (§2.2)."""
        form = await request.form()
        client_id, secret = str(form.get("client_id", "")), form.get("client_secret")
        basic = request.headers.get("authorization", "")
        if basic.lower().startswith("basic "):
            decoded = base64.b64decode(basic[6:]).decode()
            client_id, _, raw_secret = decoded.partition(":")
            client_id, secret = unquote(client_id), unquote(raw_secret)
        client = await self.authorization.get_client(client_id)
        if client is None or (client.client_secret and client.client_secret != secret):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        token = str(form.get("token", ""))
        for found in (
            self.authorization.access_tokens.get(token),
            self.authorization.refresh_tokens.get(token),
        ):
            if found is not None and found.client_id == client.client_id:
                await self.authorization.revoke_token(found)
                self.revoked.append(token)
        return Response(status_code=200)

    async def _consent(self, request: Request) -> Response:
        if request.method == "GET":
            request_id = request.query_params.get("request", "")
            return HTMLResponse(_consent_page(self.name, request_id))
        form = await request.form()
        try:
            target = self.authorization.decide(
                str(form.get("request", "")),
                str(form.get("login", "")) or "downstream-user",
                form.get("decision") == "approve",
            )
        except AuthorizeError as exc:
            return HTMLResponse(f"<p>{html.escape(exc.error)}</p>", status_code=400)
        return RedirectResponse(target, status_code=302)


def _consent_page(name: str, request_id: str) -> str:
    escaped_name, escaped_id = html.escape(name), html.escape(request_id, quote=True)
    return (
        f"<!doctype html><title>{escaped_name}: authorize</title><h1>{escaped_name}</h1>"
        "<p>An application wants to use your account here.</p>"
        '<form method="post" action="/consent">'
        f'<input type="hidden" name="request" value="{escaped_id}">'
        '<label for="login">Your account</label>'
        '<input type="text" id="login" name="login" value="downstream-user">'
        '<button type="submit" name="decision" value="approve">Approve</button>'
        '<button type="submit" name="decision" value="deny">Deny</button></form>'
    )


class _Challenges:
    """What a real server does around its MCP endpoint: a 403 `insufficient_scope` for a tool the
    token lacks a scope for (RFC 6750 §3.1; MCP "Runtime Insufficient Scope Errors"), the 401
    challenge's `scope` and, in `foreign_metadata` mode, a lying `resource_metadata`; and a record
    of the headers each MCP request carried."""

    def __init__(self, app: ASGIApp, downstream: McpDownstream) -> None:
        self.app = app
        self.downstream = downstream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/mcp"):
            await self.app(scope, receive, send)
            return
        downstream = self.downstream
        downstream.request_headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        needed = _scope_needed(body)
        token = await downstream.authorization.load_access_token(_bearer(scope))
        if needed and token is not None and needed not in token.scopes:
            challenge = (
                f'Bearer error="insufficient_scope", scope="{" ".join([*token.scopes, needed])}", '
                f'resource_metadata="{downstream.base_url}/.well-known/oauth-protected-resource/mcp"'
            )
            response = JSONResponse(
                {"error": "insufficient_scope"}, status_code=403, headers={"WWW-Authenticate": challenge}
            )
            await response(scope, receive, send)
            return

        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def challenged(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                message = {
                    **message,
                    "headers": [
                        *_without_challenge(message["headers"]),
                        (b"www-authenticate", self._challenge().encode()),
                    ],
                }
            await send(message)

        await self.app(scope, replay, challenged)

    def _challenge(self) -> str:
        downstream = self.downstream
        where = (
            "https://metadata.elsewhere.example/prm"
            if downstream.metadata_mode == "foreign_metadata"
            else f"{downstream.base_url}/.well-known/oauth-protected-resource/mcp"
        )
        challenge = f'Bearer error="invalid_token", resource_metadata="{where}"'
        if downstream.challenge_scope:
            challenge += f', scope="{" ".join(downstream.challenge_scope)}"'
        return challenge


def _scope_needed(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("method") == "tools/call":
        params = message.get("params") or {}
        return SCOPED_TOOLS.get(str(params.get("name")))
    return None


def _bearer(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization" and value.lower().startswith(b"bearer "):
            return bytes(value[7:]).decode()
    return ""


def _without_challenge(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k.lower() != b"www-authenticate"]
