"""MCP bearer-token verification: JWT access tokens from the MCP authorization server.

The user is `(iss, sub)` of a token that passed every check here (docs/threat-model.md, "1. The user is
`(iss, sub)` from a verified MCP access token").
Keys come from the issuer's JWKS, discovered via RFC 8414 / OIDC metadata, cached, and
refetched at most once a minute when a token names an unknown `kid`. A token that passed every
check is remembered until its `exp` (`VerifiedTokens`): a client sends the same token with every
request of a session, and verifying it once is enough.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import jwt
from mcp.server.auth.provider import AccessToken

from service.providers.discovery import discover_metadata
from service.settings import Settings

logger = logging.getLogger(__name__)

MAX_TOKEN_LENGTH = 8192  # refuse oversized tokens before any JOSE work
JWKS_REFETCH_INTERVAL = 60.0
MAX_VERIFIED_TOKENS = 10_000  # bounds the memory of VerifiedTokens (a few hundred bytes each)
# RFC 8725 §3.10: headers that would make us fetch or trust keys named by the attacker.
# mutant: bearer.forbidden_headers
FORBIDDEN_HEADERS = ("jku", "jwk", "x5u", "x5c")
ACCESS_TOKEN_TYPES = ("at+jwt", "application/at+jwt")  # RFC 9068 §2.1


class JwksCache:
    """The issuer's signing keys, refetched at most once per interval on an unknown kid."""

    def __init__(
        self,
        issuer: str,
        http: httpx.AsyncClient,
        jwks_url: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._issuer = issuer
        self._http = http
        self._jwks_url = jwks_url
        self._clock = clock
        self._keys: dict[str, dict[str, Any]] = {}  # kid -> JWK as published
        self._parsed: dict[tuple[str, str], jwt.PyJWK] = {}  # (kid, algorithm) -> key, until refetched
        self._fetched_at: float | None = None
        self._lock = anyio.Lock()

    async def key_for(self, kid: str, algorithm: str) -> jwt.PyJWK | None:
        """The key named `kid`, for `algorithm` (already checked against the allow-list)."""
        if kid not in self._keys:
            async with self._lock:
                if kid not in self._keys and self._may_refetch():
                    await self._refresh()
        jwk = self._keys.get(kid)
        if jwk is None:
            return None
        if (kid, algorithm) in self._parsed:  # loading a public key costs more than verifying with it
            return self._parsed[kid, algorithm]
        try:
            # `alg` is optional in a JWK (RFC 7517 §4.4): without it, bind the key to the token's
            # allowed algorithm, or an RSA key would only ever verify RS256 (not PS256).
            key = jwt.PyJWK.from_dict(jwk, algorithm=None if "alg" in jwk else algorithm)
        except jwt.PyJWTError:
            return None
        self._parsed[kid, algorithm] = key
        return key

    def _may_refetch(self) -> bool:
        return self._fetched_at is None or self._clock() - self._fetched_at >= JWKS_REFETCH_INTERVAL

    async def _refresh(self) -> None:
        self._fetched_at = self._clock()
        try:
            if not self._jwks_url:
                metadata = await discover_metadata(self._http, self._issuer)
                self._jwks_url = str(metadata["jwks_uri"])
            response = await self._http.get(self._jwks_url)
            response.raise_for_status()
            body = response.json()
            entries = body.get("keys") if isinstance(body, dict) else None
            if not isinstance(entries, list):
                raise ValueError("JWKS without a keys list")
            self._parsed = {}
            self._keys = {
                entry["kid"]: entry
                for entry in entries
                if isinstance(entry, dict)
                and isinstance(entry.get("kid"), str)
                and entry.get("use", "sig") == "sig"
            }
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            # Keep the old keys: a JWKS outage must not turn into accepting anything.
            logger.warning("jwks: fetch from %s failed: %s", self._issuer, type(exc).__name__)


class VerifiedTokens:
    """Claims of tokens that passed every check of `JwtTokenVerifier.decode`, until their `exp`.

    Keyed by the token's SHA-256 (the cache holds no token). A hit needs the exact token that was
    verified, so nothing an attacker can change in a token (header, claims, signature) reaches a
    cached answer; only tokens that passed are stored, so a refused token is checked in full
    every time. An entry is used only while the clock is before `exp`: at `exp` the token is
    verified again (where the leeway still applies).

    The trade-off: a verified token stays accepted until its `exp` even if the issuer drops its
    signing key from the JWKS meanwhile. JWT access tokens are not revocable here anyway (no
    introspection, RFC 9068 §5 leaves revocation to short lifetimes), so a token's `exp` is
    already how long a leaked token lives; the issuer's key rotation is not a revocation.

    At `max_entries`, expired entries go first, then the oldest (a client re-verifies once).
    """

    def __init__(
        self, max_entries: int = MAX_VERIFIED_TOKENS, clock: Callable[[], float] = time.time
    ) -> None:
        self._max_entries = max_entries
        self._clock = clock
        self._entries: dict[bytes, tuple[float, dict[str, Any]]] = {}  # sha256 -> (exp, claims)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, token: str) -> dict[str, Any] | None:
        digest = hashlib.sha256(token.encode()).digest()
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if self._clock() >= entry[0]:
            del self._entries[digest]
            return None
        return entry[1]

    def put(self, token: str, claims: dict[str, Any]) -> None:
        expires_at, now = float(claims["exp"]), self._clock()
        if expires_at <= now:
            return  # accepted within the leeway: never from the cache
        if len(self._entries) >= self._max_entries:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
            while len(self._entries) >= self._max_entries:
                del self._entries[next(iter(self._entries))]  # the oldest (insertion order)
        self._entries[hashlib.sha256(token.encode()).digest()] = (expires_at, claims)


class JwtTokenVerifier:
    """`mcp` TokenVerifier for JWT access tokens (RFC 9068) from one issuer."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        algorithms: tuple[str, ...],
        jwks: JwksCache,
        resource: str = "",
        require_at_jwt: bool = True,
        leeway: float = 30.0,
        verified: VerifiedTokens | None = None,
    ) -> None:
        self._issuer = issuer
        self._audience = audience
        # What the SDK's resource check compares with `resource_server_url`; the audience itself
        # (which an operator may name differently) is verified in `decode`.
        self._resource = resource or audience
        self._algorithms = list(algorithms)
        self._jwks = jwks
        self._require_at_jwt = require_at_jwt
        self._leeway = leeway
        self._verified = verified if verified is not None else VerifiedTokens()

    async def verify_token(self, token: str) -> AccessToken | None:
        claims = self._verified.get(token) if len(token) <= MAX_TOKEN_LENGTH else None
        if claims is None:
            try:
                claims = await self.decode(token)
            except jwt.PyJWTError as exc:
                logger.info("bearer rejected: %s", type(exc).__name__)
                return None
            self._verified.put(token, claims)
        scopes = str(claims.get("scope", "")).split()
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or ""),
            scopes=scopes,
            expires_at=int(claims["exp"]),
            resource=self._resource,
            subject=claims["sub"],
            # The SDK binds sessions and requestState to (client_id, iss, sub): fill `iss`.
            claims={"iss": claims["iss"], "sub": claims["sub"]},
        )

    async def decode(self, token: str) -> dict[str, Any]:
        """Verified claims, or a `jwt.PyJWTError` naming the failed check."""
        # mutant: bearer.max_token_length
        if len(token) > MAX_TOKEN_LENGTH:
            raise jwt.InvalidTokenError("token too long")
        header = jwt.get_unverified_header(token)
        # RFC 8725 §3.1: the algorithm comes from our allow-list, never from the token alone.
        # mutant: bearer.algorithm_allow_list
        if header.get("alg") not in self._algorithms:
            raise jwt.InvalidAlgorithmError("algorithm not allowed")
        if any(name in header for name in FORBIDDEN_HEADERS):
            raise jwt.InvalidTokenError("key-carrying header not accepted")
        # mutant: bearer.typ_at_jwt
        if self._require_at_jwt and str(header.get("typ", "")).lower() not in ACCESS_TOKEN_TYPES:
            # RFC 9068 §4: reject ID tokens and other JWTs presented as access tokens.
            raise jwt.InvalidTokenError("not an access token (typ)")
        kid = header.get("kid")
        if not isinstance(kid, str):
            raise jwt.InvalidTokenError("no kid")
        key = await self._jwks.key_for(kid, header["alg"])
        if key is None:
            raise jwt.InvalidKeyError("unknown kid")
        claims: dict[str, Any] = jwt.decode(
            token,
            key=key,
            algorithms=self._algorithms,
            audience=self._audience,  # RFC 8707 / MCP authorization: tokens must be for this server
            issuer=self._issuer,
            leeway=self._leeway,
            # mutant: bearer.issuer '"verify_nbf": True' -> '"verify_nbf": True, "verify_iss": False'
            # mutant: bearer.audience '"verify_nbf": True' -> '"verify_nbf": True, "verify_aud": False'
            options={"require": ["exp", "iss", "aud", "sub"], "verify_nbf": True},
        )
        # mutant: bearer.sub
        if not isinstance(claims.get("sub"), str) or not claims["sub"] or len(claims["sub"]) > 255:
            raise jwt.InvalidTokenError("sub missing or malformed")
        return claims


def token_verifier(
    settings: Settings, http: httpx.AsyncClient, resource: str | None = None
) -> JwtTokenVerifier:
    """The verifier of the configured issuer's JWT access tokens for one of our resources: `/mcp`
    (the settings' audience) unless `resource` names another (the admin API's `admin_audience`).
    A token is good for the resource whose audience it carries only (MCP 2025-11-25,
    basic/authorization, "Token Audience Binding and Validation"; RFC 8707 §2). Keys come from the
    issuer's JWKS, fetched over `http`."""
    return JwtTokenVerifier(
        issuer=settings.auth_issuer,
        audience=resource or settings.audience,
        resource=resource or settings.resource_url,
        algorithms=settings.auth_algorithms,
        jwks=JwksCache(settings.auth_issuer, http, settings.auth_jwks_url),
    )
