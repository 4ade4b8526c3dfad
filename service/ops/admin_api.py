"""The admin API: operators' controls (service/flow/operator.py) over HTTP, for automation (an IdP's
deprovisioning hook, a SOAR playbook). docs/admin.md describes it; docs/admin-openapi.json is
its OpenAPI document, and every answer, refusals and unknown routes included, is one it describes.

Served on `MCPUC_ADMIN_PORT` only, like the metrics (never on the public port). Every request
carries `Authorization: Bearer`: an access token from the MCP authorization server issued for
the admin API's own resource (`MCPUC_ADMIN_AUDIENCE`), with the admin scope and, when admin
clients are listed, issued to one of them; or the static admin token (configured as its SHA-256
only). Each action is audited with who asked, the client included; each refusal is counted
(`mcpuc_admin_refusals_total`) and audited, at most `REFUSALS_AUDITED` a minute.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service.errors import AdminRequestRefused, UnknownProvider
from service.flow.operator import DEFAULT_REVOKE_RATE
from service.mcp.bearer import token_verifier
from service.observability.audit import ThrottledAudit
from service.runtime import Runtime
from token_store import StoreUnavailable

MAX_BODY_BYTES = 4096  # the largest request body is a few short strings
STATIC_ACTOR = "static-token"
ANONYMOUS = "anonymous"  # a refused request whose bearer was not verified: nobody we know
REFUSALS_AUDITED = 10  # a minute; the metric counts every one
LIST_FILTERS = ("sub", "iss", "provider")

Handler = Callable[[Request, str], Awaitable[dict[str, Any]]]


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


def admin_bearer_of_admin_client(token: AccessToken, admin_client_ids: Collection[str]) -> bool:
    """Where the operator lists admin clients, a verified bearer acts as an operator only when it
    was issued to one of them (RFC 9068 §2.2: `client_id`, the client the token was issued to):
    an authorization server that grants the admin scope to any client an admin signs in to does
    not make every such client an operator."""
    # mutant: admin.client_allow_list
    return not admin_client_ids or token.client_id in admin_client_ids


def require_known_query_parameters(query: QueryParams, known: Collection[str]) -> None:
    """A query parameter the route does not take, or one given twice, is refused, never ignored:
    ignoring a misspelt filter (`?usr=alice`) would list every user's connections, and of two
    values one would be acted on silently (RFC 9110 §15.5.1: the server cannot process what it
    does not understand; docs/threat-model.md, "Operators' controls")."""
    names = [name for name, _ in query.multi_items()]
    unknown = sorted({name for name in names if name not in known})
    # mutant: admin.unknown_query_parameters
    if unknown:
        raise AdminRequestRefused(
            400, "invalid_request", f"unknown query parameter(s) {', '.join(unknown)[:200]}"
        )
    if len(names) != len(set(names)):
        raise AdminRequestRefused(400, "invalid_request", "a query parameter is given more than once")


def bearer_actor(token: AccessToken) -> str:
    """Who asked, in the audit log: the token's subject and the client it was issued to."""
    return f"bearer:{token.subject} client:{token.client_id}"


def refusal_response(refused: AdminRequestRefused, admin_scope: str) -> Response:
    """The JSON error answer of a refused admin request (the `Error` of docs/admin-openapi.json)."""
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
    # mutant: admin.own_audience "settings.admin_audience" -> "None"
    verifier = (
        token_verifier(settings, runtime.http, settings.admin_audience) if settings.admin_bearer else None
    )
    refusals = ThrottledAudit(REFUSALS_AUDITED, 60.0, runtime.clock)

    def refused(
        request: Request, status: int, error: str, reason: str, actor: str = ANONYMOUS
    ) -> AdminRequestRefused:
        """Count and audit a refused authentication; the error to answer with."""
        runtime.metrics.admin_refusals.labels(reason=reason).inc()
        # mutant: admin.refusals_audited
        refusals.operator(
            "refused",
            actor,
            reason=reason,
            path=request.url.path[:200],
            address=request.client.host if request.client else None,
        )
        return AdminRequestRefused(status, error, _REFUSALS[reason])

    async def actor_of(request: Request) -> str:
        # mutant: admin.own_port
        if not admin_request_on_admin_port(request, settings.admin_port):
            raise AdminRequestRefused(404, "not_found", "not found")
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise refused(request, 401, "invalid_token", "no_token")
        presented = presented.strip()
        if static_admin_token_matches(presented, settings.admin_token_sha256):
            return STATIC_ACTOR
        token = await verifier.verify_token(presented) if verifier is not None else None
        if token is None:
            raise refused(request, 401, "invalid_token", "invalid_token")
        who = bearer_actor(token)
        if not admin_bearer_of_admin_client(token, settings.admin_client_ids):
            raise refused(request, 403, "insufficient_scope", "client_not_allowed", who)
        # mutant: admin.admin_scope
        if not admin_bearer_has_admin_scope(token, settings.admin_scope):
            raise refused(request, 403, "insufficient_scope", "insufficient_scope", who)
        return who

    def endpoint(handler: Handler, query: Collection[str] = ()) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            try:
                actor = await actor_of(request)
                require_known_query_parameters(request.query_params, query)
                return JSONResponse(await handler(request, actor))
            except AdminRequestRefused as refusal:
                return refusal_response(refusal, settings.admin_scope)
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

    async def list_connections(request: Request, actor: str) -> dict[str, Any]:
        query = request.query_params
        rows = await operator.list_connections(
            actor, sub=query.get("sub"), iss=query.get("iss"), provider=query.get("provider")
        )
        return {"connections": rows}

    async def revoke_user(request: Request, actor: str) -> dict[str, Any]:
        body = await _json_body(request, ("sub", "iss", "provider"))
        sub, iss, provider = (body.get(k) for k in ("sub", "iss", "provider"))
        if not isinstance(sub, str) or not sub:
            raise AdminRequestRefused(400, "invalid_request", "sub (a non-empty string) is required")
        if not all(isinstance(body[k], str) and body[k] for k in ("iss", "provider") if k in body):
            raise AdminRequestRefused(
                400, "invalid_request", "iss and provider, when given, are non-empty strings"
            )
        return (await operator.revoke_user(actor, sub, iss=iss, provider=provider)).summary()

    async def revoke_provider(request: Request, actor: str) -> dict[str, Any]:
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

    async def not_served(request: Request, exc: Exception) -> Response:
        """No such route (404), or not with this method (405, with `Allow`: RFC 9110 §15.5.6), as
        the documented JSON error rather than Starlette's plain text."""
        assert isinstance(exc, HTTPException)
        error = "not_found" if exc.status_code == 404 else "method_not_allowed"
        headers = dict(exc.headers or {})
        if "Allow" in headers:
            # Starlette joins a set, whose order changes from one process to the next.
            headers["Allow"] = ", ".join(sorted(headers["Allow"].split(", ")))
        return JSONResponse(
            {"error": error, "error_description": exc.detail}, exc.status_code, headers=headers
        )

    return Starlette(
        routes=[
            Route("/admin/connections", endpoint(list_connections, LIST_FILTERS), methods=["GET"]),
            Route("/admin/connections/revoke", endpoint(revoke_user), methods=["POST"]),
            Route("/admin/providers/{provider}/revoke-all", endpoint(revoke_provider), methods=["POST"]),
        ],
        exception_handlers={404: not_served, 405: not_served},
    )


# What a refused caller is told, by reason: no more than it needs to present the right token.
_REFUSALS = {
    "no_token": "a bearer token is required",
    "invalid_token": "the bearer token is not valid here",
    "client_not_allowed": "the token's client is not an admin client",
    "insufficient_scope": "the token lacks the admin scope",
}


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
    # A body nested past the decoder's recursion limit is bad input like any other: 400, not 500.
    # mutant: admin.nested_body "ValueError, RecursionError" -> "ValueError"
    except (ValueError, RecursionError):
        raise AdminRequestRefused(
            400, "invalid_request", "the body is not JSON, or nested too deeply"
        ) from None
    if not isinstance(body, dict):
        raise AdminRequestRefused(400, "invalid_request", "the body is a JSON object")
    unknown = sorted(set(body) - set(fields))
    # mutant: admin.unknown_members
    if unknown:
        raise AdminRequestRefused(400, "invalid_request", f"unknown member(s) {', '.join(unknown)[:200]}")
    return body
