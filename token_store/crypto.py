"""Authenticated encryption of records at rest, with key ids so keys can rotate.

A sealed blob is self-describing: `b"v1." + kid + b"." + base64url(nonce || ciphertext)`, so a
reader knows which key sealed it and old records stay readable after a new key is added.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # 96-bit GCM nonce, random per seal
_TAG_BYTES = 16
_VERSION = b"v1"
_KID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_B64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


class DecryptError(Exception):
    """A blob could not be opened: malformed, sealed under an unknown key id, or failed authentication."""


class KeyRing:
    """AES-256-GCM keys by id: the first key seals, every key opens."""

    # docs/threat-model.md, "Tokens encrypted at rest": the associated data binds a record to its key.

    __slots__ = ("_aeads", "_primary")

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("KeyRing needs at least one key")
        aeads: dict[str, AESGCM] = {}
        for position, (kid, key) in enumerate(keys):
            # Messages name the position, not the value: a mistyped spec may put key material in the kid.
            if not isinstance(kid, str) or not _KID.fullmatch(kid):
                raise ValueError(f"key #{position + 1}: key id must match [A-Za-z0-9_-]{{1,32}}")
            if kid in aeads:
                raise ValueError(f"key #{position + 1}: duplicate key id {kid!r}")
            if not isinstance(key, bytes) or len(key) != KEY_BYTES:
                raise ValueError(f"key {kid!r}: must be exactly {KEY_BYTES} bytes")
            aeads[kid] = AESGCM(key)
        self._aeads = aeads
        self._primary = keys[0][0]

    @classmethod
    def parse(cls, spec: str) -> KeyRing:
        """Parse "kid1:<base64url key>,kid2:<base64url key>" (newest first; padding optional)."""
        entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
        if not entries:
            raise ValueError("key spec is empty; expected 'kid:<base64url 32-byte key>[,...]'")
        keys: list[tuple[str, bytes]] = []
        for position, entry in enumerate(entries, start=1):
            kid, sep, encoded = entry.partition(":")
            if not sep:
                raise ValueError(f"key #{position}: expected 'kid:<base64url key>'")
            kid = kid.strip()
            if not _KID.fullmatch(kid):
                raise ValueError(f"key #{position}: key id must match [A-Za-z0-9_-]{{1,32}}")
            try:
                key = _b64decode(encoded.strip().encode("ascii"))
            except (ValueError, UnicodeEncodeError):
                raise ValueError(f"key {kid!r}: not valid base64url") from None
            keys.append((kid, key))
        return cls(keys)

    @staticmethod
    def generate_key() -> bytes:
        """A fresh random 32-byte key."""
        return os.urandom(KEY_BYTES)

    @property
    def primary_kid(self) -> str:
        """The id of the key that seals; a blob with another kid is due for re-sealing."""
        return self._primary

    @property
    def primary_prefix(self) -> bytes:
        """The bytes every blob sealed under the primary key starts with (lets a backend find stale
        blobs with a prefix match, without parsing each one)."""
        return self.sealed_prefix(self._primary)

    @staticmethod
    def sealed_prefix(kid: str) -> bytes:
        """The bytes every blob sealed under key `kid` starts with."""
        return _VERSION + b"." + kid.encode("ascii") + b"."

    def is_stale(self, blob: bytes) -> bool:
        """Is `blob` a well-formed blob sealed under a key other than the primary (due for re-sealing)?"""
        kid = self.kid_of(blob)
        return kid is not None and kid != self._primary

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(self._aeads)

    def seal(self, plaintext: bytes, associated_data: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        # mutant: crypto.associated_data "associated_data)" -> 'b"")'
        ciphertext = self._aeads[self._primary].encrypt(nonce, plaintext, associated_data)
        return b".".join((_VERSION, self._primary.encode("ascii"), _b64encode(nonce + ciphertext)))

    def open(self, blob: bytes, associated_data: bytes) -> bytes:
        """The plaintext, or `DecryptError` (malformed, unknown kid, wrong key/data, tampered)."""
        kid, body = _split(blob)
        aead = self._aeads.get(kid)
        if aead is None:
            raise DecryptError("blob sealed under an unknown key id")
        try:
            raw = _b64decode(body)
        except ValueError:
            raise DecryptError("malformed blob") from None
        # Only the canonical encoding opens, so no edit to a stored blob goes unnoticed.
        if _b64encode(raw) != body or len(raw) < NONCE_BYTES + _TAG_BYTES:
            raise DecryptError("malformed blob")
        try:
            # mutant: crypto.associated_data "associated_data)" -> 'b"")'
            return aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated_data)
        except InvalidTag:
            raise DecryptError("blob failed authentication") from None

    @staticmethod
    def kid_of(blob: bytes) -> str | None:
        """The key id a blob names, or None when the blob is not a well-formed v1 blob header."""
        try:
            kid, _ = _split(blob)
        except DecryptError:
            return None
        return kid

    def __repr__(self) -> str:
        return f"KeyRing(kids={list(self._aeads)!r}, primary={self._primary!r})"


def _split(blob: bytes) -> tuple[str, bytes]:
    parts = blob.split(b".")
    if len(parts) != 3 or parts[0] != _VERSION:
        raise DecryptError("malformed blob")
    kid = parts[1].decode("ascii", errors="replace")
    if not _KID.fullmatch(kid):
        raise DecryptError("malformed blob")
    return kid, parts[2]


def _b64encode(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def _b64decode(text: bytes) -> bytes:
    """Strict base64url, padding optional (ValueError otherwise)."""
    if not _B64URL.fullmatch(text.decode("ascii")):
        raise ValueError("not base64url")
    stripped = text.rstrip(b"=")
    try:
        return base64.urlsafe_b64decode(stripped + b"=" * (-len(stripped) % 4))
    except binascii.Error as exc:
        raise ValueError("not base64url") from exc
