"""The development authorization server's persistent signing key.

``<data_dir>/dev-as.json`` holds the RSA private key (as a JWK), the issuer
and the default access-token audience, so that tokens minted offline by
:func:`mock_providers.mint_access_token` look exactly like tokens from
``/token`` and verify against the running server's ``/jwks.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from joserfc.jwk import KeySet, RSAKey

DEV_KEYS_FILENAME = "dev-as.json"
_FORMAT = "mcp-url-connect/dev-as/1"
_ALG = "RS256"


class NoDevKeys(Exception):
    """``<data_dir>/dev-as.json`` does not exist (the dev AS never ran there)."""


@dataclass(frozen=True)
class DevKeys:
    """Signing material and identity of the development authorization server."""

    issuer: str
    audience: str
    private_jwk: dict[str, Any]
    session_secret: str

    @property
    def kid(self) -> str:
        return str(self.private_jwk["kid"])

    @property
    def alg(self) -> str:
        return _ALG

    @cached_property
    def signing_key(self) -> RSAKey:
        """The private key, imported once: importing an RSA JWK validates it (~40 ms), which done
        for every signature would be most of the mock process's CPU."""
        return RSAKey.import_key(self.private_jwk)

    def private_key_set(self) -> KeySet:
        """The private key as a key set: joserfc then puts ``kid`` in JWS headers."""
        return KeySet([self.signing_key])

    def public_key_set(self) -> KeySet:
        return KeySet([RSAKey.import_key(self.public_jwk())])

    def public_jwk(self) -> dict[str, Any]:
        return dict(self.signing_key.as_dict(private=False, kid=self.kid, alg=_ALG, use="sig"))

    def public_jwks(self) -> dict[str, Any]:
        return {"keys": [self.public_jwk()]}


def dev_keys_path(data_dir: Path) -> Path:
    return Path(data_dir) / DEV_KEYS_FILENAME


def load_dev_keys(data_dir: Path) -> DevKeys:
    """Read ``<data_dir>/dev-as.json``; raise :class:`NoDevKeys` if it is absent."""
    path = dev_keys_path(data_dir)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NoDevKeys(
            f"No development signing key at {path}: the development authorization server "
            f"has not run with this data directory. Start it once (e.g. `mcp-url-connect demo "
            f"--data-dir {Path(data_dir)}`) to create the key, then try again."
        ) from None
    return _parse(raw, path)


def ensure_dev_keys(data_dir: Path, *, issuer: str, audience: str) -> DevKeys:
    """Load the key in ``data_dir`` or create it; record ``issuer``/``audience``.

    The key survives restarts. If the configured issuer or audience changed, the
    file is rewritten with the new values and the same key.
    """
    data_dir = Path(data_dir)
    if not data_dir.exists():
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(data_dir, 0o700)
    path = dev_keys_path(data_dir)
    if not path.exists():
        created = DevKeys(
            issuer=issuer,
            audience=audience,
            private_jwk=_generate_private_jwk(),
            session_secret=secrets.token_urlsafe(32),
        )
        if _write_new(path, created):
            return created
    os.chmod(path, 0o600)
    keys = load_dev_keys(data_dir)
    if keys.issuer != issuer or keys.audience != audience:
        keys = DevKeys(
            issuer=issuer,
            audience=audience,
            private_jwk=keys.private_jwk,
            session_secret=keys.session_secret,
        )
        _replace(path, keys)
    return keys


def _generate_private_jwk() -> dict[str, Any]:
    key = RSAKey.generate_key(2048, private=True)
    kid = key.thumbprint()
    return dict(key.as_dict(private=True, kid=kid, alg=_ALG, use="sig"))


def _serialize(keys: DevKeys) -> str:
    document = {
        "format": _FORMAT,
        "issuer": keys.issuer,
        "audience": keys.audience,
        "signing_key": keys.private_jwk,
        "session_secret": keys.session_secret,
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


# A memo keyed by the file's content, not state: a changed file parses anew. Importing the RSA
# key validates it (~35 ms); `mint_access_token` (the kit mints a bearer per client) and
# `dev-token` read the file every time.
@lru_cache(maxsize=16)
def _parse(raw: str, path: Path) -> DevKeys:
    try:
        document = json.loads(raw)
        if document.get("format") != _FORMAT:
            raise ValueError(f"unknown format {document.get('format')!r}")
        keys = DevKeys(
            issuer=str(document["issuer"]),
            audience=str(document["audience"]),
            private_jwk=dict(document["signing_key"]),
            session_secret=str(document["session_secret"]),
        )
        keys.signing_key  # noqa: B018  # imported now: fails loudly on a damaged key
        return keys
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path} is not a valid development key file: {exc}") from exc


def _write_temp(path: Path, keys: DevKeys) -> Path:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(_serialize(keys))
        handle.flush()
        os.fsync(handle.fileno())
    return tmp


def _write_new(path: Path, keys: DevKeys) -> bool:
    """Create ``path`` atomically; False if another process created it first."""
    tmp = _write_temp(path, keys)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return True


def _replace(path: Path, keys: DevKeys) -> None:
    tmp = _write_temp(path, keys)
    os.replace(tmp, path)
