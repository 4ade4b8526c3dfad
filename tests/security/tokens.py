"""Bearer tokens an attacker would present at /mcp: crafted with the dev AS key read from
<data_dir>/dev-as.json (or with keys of the attacker's own), plus genuine tokens of the wrong kind
obtained from the dev AS the way its OIDC client would."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from jwt.algorithms import RSAAlgorithm

from mock_providers.demo import LOGIN_CLIENT_ID
from mock_providers.testing.browser import forms_in
from tests.security.attack import Servers


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def b64json(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


@dataclass(frozen=True)
class DevKey:
    private: rsa.RSAPrivateKey
    kid: str
    issuer: str

    @property
    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def dev_key(servers: Servers) -> DevKey:
    """The dev AS's signing key, as an attacker who stole it (or the AS itself) would hold it."""
    return _dev_key(str(servers.data_dir / "dev-as.json"))


@functools.lru_cache(maxsize=8)
def _dev_key(path: str) -> DevKey:
    document = json.loads(Path(path).read_text())
    jwk = document["signing_key"]
    private = RSAAlgorithm.from_jwk(json.dumps(jwk))
    assert isinstance(private, rsa.RSAPrivateKey)
    return DevKey(private, str(jwk["kid"]), str(document["issuer"]))


def attacker_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def claims(servers: Servers, sub: str | None = "alice", **overrides: Any) -> dict[str, Any]:
    """RFC 9068 claims the server accepts; an override of None removes the claim."""
    now = int(time.time())
    values: dict[str, Any] = {
        "iss": servers.demo.settings.auth_issuer,
        "aud": servers.demo.settings.resource_url,
        "sub": sub,
        "client_id": "attacker-client",
        "scope": "",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "jti": secrets.token_urlsafe(8),
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def sign(key: rsa.RSAPrivateKey, header: dict[str, Any], payload: dict[str, Any]) -> str:
    """RS256 by hand, so any header can be sent (pyjwt refuses some)."""
    signing_input = f"{b64json(header)}.{b64json(payload)}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{b64url(signature)}"


def header(key: DevKey, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"alg": "RS256", "typ": "at+jwt", "kid": key.kid}
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def dev_signed(servers: Servers, *, head: dict[str, Any] | None = None, **claim_overrides: Any) -> str:
    key = dev_key(servers)
    return sign(key.private, header(key, **(head or {})), claims(servers, **claim_overrides))


def unsigned(servers: Servers) -> str:
    key = dev_key(servers)
    return f"{b64json(header(key, alg='none'))}.{b64json(claims(servers))}."


def hs256_with_public_key(servers: Servers) -> str:
    """Algorithm confusion: an HMAC keyed with the AS's public key PEM (RFC 8725 §2.1)."""
    key = dev_key(servers)
    signing_input = f"{b64json(header(key, alg='HS256'))}.{b64json(claims(servers))}"
    mac = hmac.new(key.public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(mac)}"


def attacker_jwk(private: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    jwk.update(kid=kid, use="sig", alg="RS256")
    return jwk


def tampered(token: str, servers: Servers, sub: str) -> str:
    """A genuine token whose payload was swapped for another user's; the signature kept."""
    head, _, signature = token.split(".")
    return f"{head}.{b64json(claims(servers, sub=sub))}.{signature}"


# ---- genuine tokens of the wrong kind --------------------------------------------------------


def login_client_tokens(servers: Servers, username: str) -> dict[str, Any]:
    """Run the dev AS's OIDC flow as this server's login client; its token response (with an ID
    token: typ JWT, aud = the login client id). Synchronous: used from module fixtures."""
    settings = servers.demo.settings
    verifier = secrets.token_urlsafe(48)
    challenge = b64url(hashlib.sha256(verifier.encode()).digest())
    issuer = settings.auth_issuer
    params = {
        "response_type": "code",
        "client_id": LOGIN_CLIENT_ID,
        "redirect_uri": settings.login_callback_url,
        "scope": "openid",
        "state": secrets.token_urlsafe(16),
        "nonce": secrets.token_urlsafe(16),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    with httpx.Client(follow_redirects=False, timeout=10) as http:
        page = http.get(f"{issuer}/authorize", params=params)
        [form] = [f for f in forms_in(page.text) if "username" in f.fields]
        answer = http.post(f"{issuer}{form.action}", data={**form.fields, "username": username})
        while answer.headers["location"].startswith("/"):
            answer = http.get(f"{issuer}{answer.headers['location']}")
        code = httpx.URL(answer.headers["location"]).params["code"]
        token = http.post(
            f"{issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": settings.login_callback_url,
                "code_verifier": verifier,
            },
            auth=(LOGIN_CLIENT_ID, settings.login_client_secret),
        )
        token.raise_for_status()
        body: dict[str, Any] = token.json()
        return body
