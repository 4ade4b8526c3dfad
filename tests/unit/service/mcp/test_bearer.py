"""MCP bearer verification: JwksCache and JwtTokenVerifier (DESIGN invariant 1).

A real RSA key signs the tokens; the issuer's metadata and JWKS are served by an
httpx.MockTransport that records every request, so tests can count fetches and prove that
nothing is fetched from URLs named by a token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from jwt.algorithms import RSAAlgorithm

from service.mcp.bearer import (
    JWKS_REFETCH_INTERVAL,
    MAX_TOKEN_LENGTH,
    JwksCache,
    JwtTokenVerifier,
    VerifiedTokens,
    token_verifier,
)
from service.settings import Settings

ISSUER = "https://as.example.com"
AUDIENCE = "https://mcp.example.com/mcp"
METADATA_URL = ISSUER + "/.well-known/oauth-authorization-server"
JWKS_URL = ISSUER + "/jwks.json"
ATTACKER_URL = "https://attacker.example/keys.json"
KID = "k1"
ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")


# ---- keys and tokens ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def other_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwk.update(kid=kid, use="sig", alg="RS256")
    return jwk


def public_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64json(value: dict[str, Any]) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid RFC 9068 claims; an override of None removes the claim."""
    now = int(time.time())
    values: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "client_id": "claude",
        "scope": "mcp:tools profile",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "jti": "jti-1",
    }
    values.update(overrides)
    return {name: value for name, value in values.items() if value is not None}


def mint(
    key: rsa.RSAPrivateKey,
    *,
    kid: str | None = KID,
    typ: str = "at+jwt",
    extra_headers: dict[str, Any] | None = None,
    algorithm: str = "RS256",
    **claim_overrides: Any,
) -> str:
    headers: dict[str, Any] = {"typ": typ}  # typ "" makes pyjwt drop the header
    if kid is not None:
        headers["kid"] = kid
    headers.update(extra_headers or {})
    return jwt.encode(claims(**claim_overrides), key, algorithm=algorithm, headers=headers)


def sign_raw(key: rsa.RSAPrivateKey, header: dict[str, Any], payload: dict[str, Any]) -> str:
    """RS256 by hand, for headers pyjwt refuses to encode."""
    signing_input = f"{b64json(header)}.{b64json(payload)}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


def unsigned_token(payload: dict[str, Any]) -> str:
    """`alg: none` crafted by hand: header.payload. with an empty signature."""
    return f"{b64json({'alg': 'none', 'typ': 'at+jwt', 'kid': KID})}.{b64json(payload)}."


def hs256_with_public_key(key: rsa.RSAPrivateKey, payload: dict[str, Any]) -> str:
    """The algorithm-confusion attack: HMAC keyed with the RSA public key PEM."""
    signing_input = f"{b64json({'alg': 'HS256', 'typ': 'at+jwt', 'kid': KID})}.{b64json(payload)}"
    mac = hmac.new(public_pem(key), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


# ---- the issuer, served by MockTransport ---------------------------------------------------


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeIssuer:
    """Metadata + JWKS for ISSUER; records every request the code under test makes."""

    jwks: list[dict[str, Any]]
    metadata_issuer: str = ISSUER
    jwks_status: int = 200
    jwks_unreachable: bool = False
    requests: list[httpx.Request] = field(default_factory=list)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        url = str(request.url)
        if url == METADATA_URL:
            return httpx.Response(200, json={"issuer": self.metadata_issuer, "jwks_uri": JWKS_URL})
        if url == JWKS_URL:
            if self.jwks_unreachable:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(self.jwks_status, json={"keys": self.jwks})
        return httpx.Response(404)

    def fetched(self, url: str) -> int:
        return sum(1 for request in self.requests if str(request.url) == url)


@dataclass
class Env:
    issuer: FakeIssuer
    clock: FakeClock
    verifier: JwtTokenVerifier
    key: rsa.RSAPrivateKey
    other_key: rsa.RSAPrivateKey


@pytest.fixture
def env(signing_key: rsa.RSAPrivateKey, other_key: rsa.RSAPrivateKey) -> Env:
    issuer = FakeIssuer(jwks=[public_jwk(signing_key, KID)])
    clock = FakeClock()
    http = httpx.AsyncClient(transport=httpx.MockTransport(issuer.handler))
    cache = JwksCache(ISSUER, http, clock=clock)
    verifier = JwtTokenVerifier(issuer=ISSUER, audience=AUDIENCE, algorithms=ALGORITHMS, jwks=cache)
    return Env(issuer, clock, verifier, signing_key, other_key)


async def assert_rejected(verifier: JwtTokenVerifier, token: str) -> jwt.PyJWTError:
    assert await verifier.verify_token(token) is None
    with pytest.raises(jwt.PyJWTError) as caught:
        await verifier.decode(token)
    return caught.value


# ---- accepted tokens -----------------------------------------------------------------------


async def test_the_mcp_verifier_is_built_from_the_settings(signing_key: rsa.RSAPrivateKey) -> None:
    issuer = FakeIssuer(jwks=[public_jwk(signing_key, KID)])
    http = httpx.AsyncClient(transport=httpx.MockTransport(issuer.handler))
    settings = Settings(public_url="https://mcp.example.com", auth_issuer=ISSUER, auth_jwks_url=JWKS_URL)
    verifier = token_verifier(settings, http)
    access = await verifier.verify_token(mint(signing_key))  # aud: the settings' <public_url>/mcp
    assert access is not None and access.resource == settings.resource_url
    await assert_rejected(verifier, mint(signing_key, aud="https://other.example.com/mcp"))
    assert issuer.fetched(METADATA_URL) == 0  # the configured JWKS URL, no discovery


async def test_valid_token_yields_the_callers_identity(env: Env) -> None:
    token = mint(env.key)
    access = await env.verifier.verify_token(token)
    assert access is not None
    assert access.subject == "alice"
    assert access.claims is not None and access.claims["iss"] == ISSUER
    assert access.claims["sub"] == "alice"
    assert access.client_id == "claude"
    assert access.scopes == ["mcp:tools", "profile"]
    assert access.resource == AUDIENCE
    assert access.token == token
    assert access.expires_at == jwt.decode(token, options={"verify_signature": False})["exp"]


async def test_client_id_falls_back_to_azp_and_aud_may_be_a_list(env: Env) -> None:
    token = mint(env.key, client_id=None, azp="other-client", aud=["https://x.example", AUDIENCE])
    access = await env.verifier.verify_token(token)
    assert access is not None
    assert access.client_id == "other-client"


@pytest.mark.parametrize("typ", ["at+jwt", "application/at+jwt", "AT+JWT"])
async def test_rfc9068_typ_values_are_accepted(env: Env, typ: str) -> None:
    assert await env.verifier.verify_token(mint(env.key, typ=typ)) is not None


async def test_hand_signed_token_is_accepted(env: Env) -> None:
    # Control for the hand-crafted negatives: sign_raw itself produces valid tokens.
    token = sign_raw(env.key, {"alg": "RS256", "typ": "at+jwt", "kid": KID}, claims())
    assert await env.verifier.verify_token(token) is not None


async def test_keys_are_discovered_from_metadata_and_cached(env: Env) -> None:
    for _ in range(3):
        assert await env.verifier.verify_token(mint(env.key)) is not None
    assert env.issuer.fetched(METADATA_URL) == 1
    assert env.issuer.fetched(JWKS_URL) == 1


async def test_configured_jwks_url_skips_discovery(signing_key: rsa.RSAPrivateKey) -> None:
    issuer = FakeIssuer(jwks=[public_jwk(signing_key, KID)])
    http = httpx.AsyncClient(transport=httpx.MockTransport(issuer.handler))
    cache = JwksCache(ISSUER, http, jwks_url=JWKS_URL)
    verifier = JwtTokenVerifier(issuer=ISSUER, audience=AUDIENCE, algorithms=ALGORITHMS, jwks=cache)
    assert await verifier.verify_token(mint(signing_key)) is not None
    assert [str(r.url) for r in issuer.requests] == [JWKS_URL]


async def test_token_just_under_the_length_limit_is_accepted(env: Env) -> None:
    # Positive control for the length test below: size alone, not padding, is what is refused.
    best = ""
    for pad in range(5000, 7000):
        token = mint(env.key, pad="x" * pad)
        if len(token) > MAX_TOKEN_LENGTH:
            break
        best = token
    assert MAX_TOKEN_LENGTH - 3 <= len(best) <= MAX_TOKEN_LENGTH
    assert await env.verifier.verify_token(best) is not None


# ---- rejected tokens -----------------------------------------------------------------------

TokenFactory = Callable[[Env], str]

REJECTED: dict[str, TokenFactory] = {
    "expired beyond leeway": lambda e: mint(e.key, iat=int(time.time()) - 600, exp=int(time.time()) - 31),
    "nbf in the future": lambda e: mint(e.key, nbf=int(time.time()) + 120),
    "wrong aud": lambda e: mint(e.key, aud="https://other.example.com/mcp"),
    "aud list without ours": lambda e: mint(e.key, aud=["https://a.example", "https://b.example"]),
    "wrong iss": lambda e: mint(e.key, iss="https://evil.example.com"),
    "missing exp": lambda e: mint(e.key, exp=None),
    "missing aud": lambda e: mint(e.key, aud=None),
    "missing iss": lambda e: mint(e.key, iss=None),
    "missing sub": lambda e: mint(e.key, sub=None),
    "empty sub": lambda e: mint(e.key, sub=""),
    "non-string sub": lambda e: mint(e.key, sub=12345),
    "oversized sub": lambda e: mint(e.key, sub="a" * 256),
    "alg none": lambda e: unsigned_token(claims()),
    "HS256 keyed with the RSA public key": lambda e: hs256_with_public_key(e.key, claims()),
    "typ missing": lambda e: mint(e.key, typ=""),
    "typ JWT (an ID token)": lambda e: mint(e.key, typ="JWT"),
    "typ id_token+jwt": lambda e: mint(e.key, typ="id_token+jwt"),
    "no kid": lambda e: mint(e.key, kid=None),
    "non-string kid": lambda e: sign_raw(e.key, {"alg": "RS256", "typ": "at+jwt", "kid": 1}, claims()),
    "signed by another key with the same kid": lambda e: mint(e.other_key),
    "tampered payload": lambda e: tamper(mint(e.key)),
    "not a JWT": lambda e: "not-a-jwt",
    "empty string": lambda e: "",
}


def tamper(token: str) -> str:
    header, _, signature = token.split(".")
    return f"{header}.{b64json(claims(sub='mallory'))}.{signature}"


@pytest.mark.parametrize("factory", list(REJECTED.values()), ids=list(REJECTED))
async def test_invalid_tokens_are_rejected(env: Env, factory: TokenFactory) -> None:
    await assert_rejected(env.verifier, factory(env))


async def test_expiry_within_leeway_is_tolerated(env: Env) -> None:
    # Control for "expired beyond leeway": the rejection is the exp check, not the helper.
    now = int(time.time())
    assert await env.verifier.verify_token(mint(env.key, iat=now - 600, exp=now - 5)) is not None


def test_pyjwt_cannot_be_talked_into_hs256_with_a_pem_key(signing_key: rsa.RSAPrivateKey) -> None:
    # Why the HS256 token above is crafted by hand.
    with pytest.raises(jwt.PyJWTError):
        jwt.encode(claims(), public_pem(signing_key), algorithm="HS256")


@pytest.mark.parametrize(
    "factory",
    [
        lambda e: unsigned_token(claims()),
        lambda e: hs256_with_public_key(e.key, claims()),
        lambda e: mint(e.key, algorithm="RS512"),
    ],
    ids=["none", "HS256", "RS512 (not configured)"],
)
async def test_disallowed_algorithm_is_refused_before_any_fetch(env: Env, factory: TokenFactory) -> None:
    # The allow-list is checked on the header first (RFC 8725 §3.1): no JWKS work for such tokens.
    error = await assert_rejected(env.verifier, factory(env))
    assert isinstance(error, jwt.InvalidAlgorithmError)
    assert env.issuer.requests == []


@pytest.mark.parametrize("header", ["jku", "jwk", "x5u", "x5c"])
async def test_key_carrying_headers_are_rejected_without_fetching(env: Env, header: str) -> None:
    values: dict[str, Any] = {
        "jku": ATTACKER_URL,
        "jwk": public_jwk(env.other_key, KID),
        "x5u": ATTACKER_URL,
        "x5c": ["MIIBfake"],
    }
    token = mint(env.key, extra_headers={header: values[header]})
    error = await assert_rejected(env.verifier, token)
    assert "header" in str(error)
    assert all(request.url.host == "as.example.com" for request in env.issuer.requests)
    assert not any(str(request.url) == ATTACKER_URL for request in env.issuer.requests)


async def test_attacker_jwk_header_does_not_verify_attacker_signature(env: Env) -> None:
    token = mint(env.other_key, extra_headers={"jwk": public_jwk(env.other_key, KID)})
    await assert_rejected(env.verifier, token)


async def test_oversized_token_is_refused_before_any_fetch(env: Env) -> None:
    token = mint(env.key, pad="x" * 7000)
    assert len(token) > MAX_TOKEN_LENGTH
    error = await assert_rejected(env.verifier, token)
    assert "too long" in str(error)
    assert env.issuer.requests == []


async def test_garbage_longer_than_the_limit_is_refused_before_any_fetch(env: Env) -> None:
    await assert_rejected(env.verifier, "e" * (MAX_TOKEN_LENGTH + 1))
    assert env.issuer.requests == []


# ---- unknown kids and refetch rate -----------------------------------------------------------


async def test_unknown_kid_refetches_at_most_once_per_interval(env: Env) -> None:
    assert await env.verifier.verify_token(mint(env.key)) is not None
    assert env.issuer.fetched(JWKS_URL) == 1

    unknown = mint(env.key, kid="unknown")
    for elapsed in (0.0, 1.0, JWKS_REFETCH_INTERVAL / 2, JWKS_REFETCH_INTERVAL - 0.1):
        env.clock.now = 1000.0 + elapsed
        for _ in range(3):
            await assert_rejected(env.verifier, unknown)
        assert env.issuer.fetched(JWKS_URL) == 1, elapsed

    env.clock.now = 1000.0 + JWKS_REFETCH_INTERVAL
    await assert_rejected(env.verifier, unknown)
    assert env.issuer.fetched(JWKS_URL) == 2
    for _ in range(5):
        await assert_rejected(env.verifier, mint(env.key, kid="another-unknown"))
    assert env.issuer.fetched(JWKS_URL) == 2
    assert env.issuer.fetched(METADATA_URL) == 1  # the jwks_uri is remembered


async def test_known_kid_never_refetches(env: Env) -> None:
    assert await env.verifier.verify_token(mint(env.key)) is not None
    env.clock.now += 10 * JWKS_REFETCH_INTERVAL
    assert await env.verifier.verify_token(mint(env.key)) is not None
    assert env.issuer.fetched(JWKS_URL) == 1


async def test_rotated_in_key_is_picked_up_after_the_interval(env: Env) -> None:
    assert await env.verifier.verify_token(mint(env.key)) is not None
    env.issuer.jwks.append(public_jwk(env.other_key, "k2"))
    rotated = mint(env.other_key, kid="k2")

    env.clock.now += 1
    await assert_rejected(env.verifier, rotated)  # too soon to refetch
    env.clock.now += JWKS_REFETCH_INTERVAL
    assert await env.verifier.verify_token(rotated) is not None
    assert env.issuer.fetched(JWKS_URL) == 2


async def test_encryption_keys_in_the_jwks_are_not_used_for_signatures(env: Env) -> None:
    env.issuer.jwks = [{**public_jwk(env.key, KID), "use": "enc"}]
    await assert_rejected(env.verifier, mint(env.key))


# ---- issuer metadata and outages -----------------------------------------------------------


async def test_metadata_naming_another_issuer_yields_no_keys(env: Env) -> None:
    env.issuer.metadata_issuer = "https://evil.example.com"
    await assert_rejected(env.verifier, mint(env.key))
    assert env.issuer.fetched(METADATA_URL) >= 1
    assert env.issuer.fetched(JWKS_URL) == 0


@pytest.mark.parametrize("outage", ["http 500", "connection refused"])
async def test_jwks_outage_rejects_and_keeps_previous_keys(env: Env, outage: str) -> None:
    assert await env.verifier.verify_token(mint(env.key)) is not None

    if outage == "http 500":
        env.issuer.jwks_status = 500
    else:
        env.issuer.jwks_unreachable = True
    env.issuer.jwks.append(public_jwk(env.other_key, "k2"))
    env.clock.now += JWKS_REFETCH_INTERVAL

    await assert_rejected(env.verifier, mint(env.other_key, kid="k2"))
    assert env.issuer.fetched(JWKS_URL) == 2  # the refetch was attempted, and failed
    assert await env.verifier.verify_token(mint(env.key)) is not None  # old key still usable


async def test_jwks_down_from_the_start_rejects(env: Env) -> None:
    env.issuer.jwks_unreachable = True
    await assert_rejected(env.verifier, mint(env.key))
    assert env.issuer.fetched(JWKS_URL) == 1


# ---- regressions: bugs found in review, fixed ---------------------------------------------


@pytest.mark.parametrize(
    "body", [[], {"keys": ["not-an-object"]}, {"keys": "abc"}], ids=["list", "str-entry", "str-keys"]
)
async def test_malformed_jwks_is_a_rejection_not_a_crash(signing_key: rsa.RSAPrivateKey, body: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    cache = JwksCache(ISSUER, http, jwks_url=JWKS_URL)
    verifier = JwtTokenVerifier(issuer=ISSUER, audience=AUDIENCE, algorithms=ALGORITHMS, jwks=cache)
    assert await verifier.verify_token(mint(signing_key)) is None


async def test_ps256_token_verifies_against_a_jwk_without_alg(signing_key: rsa.RSAPrivateKey) -> None:
    jwk = public_jwk(signing_key, KID)
    del jwk["alg"]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"keys": [jwk]})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    cache = JwksCache(ISSUER, http, jwks_url=JWKS_URL)
    verifier = JwtTokenVerifier(issuer=ISSUER, audience=AUDIENCE, algorithms=ALGORITHMS, jwks=cache)
    assert await verifier.verify_token(mint(signing_key, algorithm="PS256")) is not None


# ---- VerifiedTokens: a token verified once per session, until its exp ----------------------


@dataclass
class CountingVerifier:
    verifier: JwtTokenVerifier
    decodes: int = 0


def counting(env: Env, verified: VerifiedTokens | None = None) -> CountingVerifier:
    """A verifier on `env`'s issuer that counts its full verifications (`decode`)."""
    jwks = JwksCache(ISSUER, httpx.AsyncClient(transport=httpx.MockTransport(env.issuer.handler)))
    verifier = JwtTokenVerifier(
        issuer=ISSUER, audience=AUDIENCE, algorithms=ALGORITHMS, jwks=jwks, verified=verified
    )
    counted = CountingVerifier(verifier)
    decode = verifier.decode

    async def counting_decode(token: str) -> dict[str, Any]:
        counted.decodes += 1
        return await decode(token)

    verifier.decode = counting_decode  # type: ignore[method-assign]
    return counted


async def test_a_verified_token_is_decoded_once_until_its_exp(env: Env) -> None:
    counted = counting(env)
    token = mint(env.key)
    answers = [await counted.verifier.verify_token(token) for _ in range(3)]
    assert counted.decodes == 1
    assert all(a is not None and a.subject == "alice" and a.token == token for a in answers)


async def test_a_cached_token_is_verified_again_from_its_exp(env: Env) -> None:
    now = float(int(time.time()))
    clock = FakeClock(now)
    counted = counting(env, VerifiedTokens(clock=clock))
    token = mint(env.key, exp=int(now) + 60)
    assert await counted.verifier.verify_token(token) is not None
    clock.now = now + 59
    assert await counted.verifier.verify_token(token) is not None
    assert counted.decodes == 1
    clock.now = now + 60
    assert await counted.verifier.verify_token(token) is not None  # within the leeway, in full
    assert counted.decodes == 2


async def test_refused_tokens_are_never_cached(env: Env) -> None:
    verified = VerifiedTokens()
    counted = counting(env, verified)
    for token in (tamper(mint(env.key)), mint(env.key, aud="https://other.example/mcp")):
        assert await counted.verifier.verify_token(token) is None
        assert await counted.verifier.verify_token(token) is None
    assert counted.decodes == 4
    assert len(verified) == 0


async def test_a_cached_token_answers_only_for_its_exact_text(env: Env) -> None:
    counted = counting(env)
    token = mint(env.key)
    assert await counted.verifier.verify_token(token) is not None
    assert await counted.verifier.verify_token(tamper(token)) is None
    assert await counted.verifier.verify_token(token + " ") is None


async def test_a_token_accepted_within_the_leeway_is_not_cached(env: Env) -> None:
    verified = VerifiedTokens()
    counted = counting(env, verified)
    now = int(time.time())
    token = mint(env.key, iat=now - 600, exp=now - 5)
    assert await counted.verifier.verify_token(token) is not None
    assert len(verified) == 0


def test_verified_tokens_are_bounded_expired_first_then_oldest() -> None:
    clock = FakeClock(1000.0)
    verified = VerifiedTokens(max_entries=2, clock=clock)
    verified.put("short-lived", {"exp": 1010})
    verified.put("first", {"exp": 2000})
    clock.now = 1020
    verified.put("second", {"exp": 2000})  # full: the expired entry goes, "first" stays
    assert len(verified) == 2 and verified.get("first") is not None
    verified.put("third", {"exp": 2000})  # full of live entries: the oldest goes
    assert len(verified) == 2
    assert verified.get("first") is None
    assert verified.get("second") == {"exp": 2000} and verified.get("third") == {"exp": 2000}
