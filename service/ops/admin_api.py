"""The admin API: operators' controls (service/flow/operator.py) over HTTP, for automation (an IdP's
deprovisioning hook, a SOAR playbook). docs/admin.md describes it; docs/admin-openapi.json is
its OpenAPI document.

Served on `MCPUC_ADMIN_PORT` only, like the metrics (never on the public port). Every request
carries `Authorization: Bearer`: an access token from the MCP authorization server with the
configured admin scope, or the static admin token (configured as its SHA-256 only). Each action
is audited with who asked (service/observability/audit.py, `operator_*` events).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service.errors import AdminRequestRefused, UnknownProvider
from service.flow.operator import DEFAULT_REVOKE_RATE
from service.mcp.bearer import mcp_token_verifier
from service.observability.audit import audit_operator
from service.runtime import Runtime
from token_store import StoreUnavailable

MAX_BODY_BYTES = 4096  # the largest request body is a few short strings
STATIC_ACTOR = "static-token"


def admin_request_on_admin_port(request: Request, admin_port: int) -> bool:
    """The admin API answers only on its own port: a request that reached this app through any
    other listener (the public one, by a misrouted proxy or mount) is refused as not found
    (docs/threat-model.md, "Operators' controls"; RFC 9110 §15.5.5)."""
    server = request.scope.get("server")
    return server is not None and server[1] == admin_port


def static_admin_token_matches(presented: str, configured_sha256: str) -> bool:
    """The static admin token, compared as SHA-256 digests in constant time (the configuration
    holds only the digest, so a leaked configuration does not leak the token)."""
    if not configured_sha256:
        return False
    digest = hashlib.sha256(presented.encode()).hexdigest()
    # mutant: admin.static_token
    return hmac.compare_digest(digest, configured_sha256)


def admin_bearer_has_admin_scope(token: AccessToken, admin_scope: str) -> bool:
    """A verified bearer acts as an operator only with the admin scope (RFC 6750 §3.1,
    `insufficient_scope`: a user's ordinary MCP token is not an admin token)."""
    return admin_scope in token.scopes


def refusal_response(refused: AdminRequestRefused, admin_scope: str) -> Response:
    """The JSON error answer of a refused admin request."""
    headers = {}
    if refused.status in (401, 403):
        # RFC 6750 §3: the scheme, the error and (for insufficient_scope) the scope needed.
        challenge = f'Bearer error="{refused.error}"' if refused.status == 403 else "Bearer"
        if refused.status == 403:
            challenge += f', scope="{admin_scope}"'
        headers["WWW-Authenticate"] = challenge
    return JSONResponse(
        {"error": refused.error, "error_description": refused.description}, refused.status, headers=headers
    )


def admin_app(runtime: Runtime) -> Starlette:
    """The admin API for `MCPUC_ADMIN_PORT` (the runtime is the main app's)."""
    settings = runtime.settings
    operator = runtime.operator
    verifier = mcp_token_verifier(settings, runtime.http)

    async def actor_of(request: Request) -> str:
        # mutant: admin.own_port
        if not admin_request_on_admin_port(request, settings.admin_port):
            raise AdminRequestRefused(404, "not_found", "not found")
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise AdminRequestRefused(401, "invalid_token", "a bearer token is required")
        presented = presented.strip()
        if static_admin_token_matches(presented, settings.admin_token_sha256):
            return STATIC_ACTOR
        token = await verifier.verify_token(presented)
        if token is None:
            raise AdminRequestRefused(401, "invalid_token", "the bearer token is not valid here")
        who = f"bearer:{token.subject}"
        # mutant: admin.admin_scope
        if not admin_bearer_has_admin_scope(token, settings.admin_scope):
            audit_operator("refused", who, path=request.url.path, reason="insufficient_scope")
            raise AdminRequestRefused(
                403, "insufficient_scope", f"the token lacks the scope {settings.admin_scope}"
            )
        return who

    def endpoint(handler: Any) -> Any:
        async def guarded(request: Request) -> Response:
            try:
                actor = await actor_of(request)
                return JSONResponse(await handler(request, actor))
            except AdminRequestRefused as refused:
                return refusal_response(refused, settings.admin_scope)
            except UnknownProvider as exc:
                return refusal_response(
                    AdminRequestRefused(404, "unknown_provider", str(exc)), settings.admin_scope
                )
            except StoreUnavailable:
                return refusal_response(
                    AdminRequestRefused(503, "store_unavailable", "the store is unavailable"),
                    settings.admin_scope,
                )

        return guarded

    async def list_connections(request: Request, actor: str) -> Any:
        query = request.query_params
        rows = await operator.list_connections(
            actor, sub=query.get("sub"), iss=query.get("iss"), provider=query.get("provider")
        )
        return {"connections": rows}

    async def revoke_user(request: Request, actor: str) -> Any:
        body = await _json_body(request, ("sub", "iss", "provider"))
        sub, iss, provider = (body.get(k) for k in ("sub", "iss", "provider"))
        if not isinstance(sub, str) or not sub:
            raise AdminRequestRefused(400, "invalid_request", "sub (a non-empty string) is required")
        if not all(v is None or (isinstance(v, str) and v) for v in (iss, provider)):
            raise AdminRequestRefused(
                400, "invalid_request", "iss and provider, when given, are non-empty strings"
            )
        return (await operator.revoke_user(actor, sub, iss=iss, provider=provider)).summary()

    async def revoke_provider(request: Request, actor: str) -> Any:
        body = await _json_body(request, ("dry_run", "rate"))
        dry_run, rate = body.get("dry_run", False), body.get("rate", DEFAULT_REVOKE_RATE)
        if not isinstance(dry_run, bool):
            raise AdminRequestRefused(400, "invalid_request", "dry_run is a boolean")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 10_000:
            raise AdminRequestRefused(
                400, "invalid_request", "rate is a number of revocations per second, 0 < rate <= 10000"
            )
        provider = request.path_params["provider"]
        return (await operator.revoke_provider(actor, provider, dry_run=dry_run, rate=float(rate))).summary()

    return Starlette(
        routes=[
            Route("/admin/connections", endpoint(list_connections), methods=["GET"]),
            Route("/admin/connections/revoke", endpoint(revoke_user), methods=["POST"]),
            Route("/admin/providers/{provider}/revoke-all", endpoint(revoke_provider), methods=["POST"]),
        ]
    )


async def _json_body(request: Request, fields: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object body, with no member but `fields` (a misspelt filter is an error, never
    ignored: ignoring `provder` would widen a revocation to every provider)."""
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise AdminRequestRefused(413, "invalid_request", f"the body is larger than {MAX_BODY_BYTES} bytes")
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise AdminRequestRefused(400, "invalid_request", "the body is not JSON") from None
    if not isinstance(body, dict):
        raise AdminRequestRefused(400, "invalid_request", "the body is a JSON object")
    unknown = sorted(set(body) - set(fields))
    # mutant: admin.unknown_members
    if unknown:
        raise AdminRequestRefused(400, "invalid_request", f"unknown member(s) {', '.join(unknown)[:200]}")
    return body
