"""KeyRing: AEAD with key ids (docs/threat-model.md, "Tokens encrypted at rest")."""

from __future__ import annotations

import base64

import pytest

from token_store.crypto import DecryptError, KeyRing

AD = b'["conn","https://as.example","alice","github","1"]'


def b64u(raw: bytes, *, pad: bool = False) -> str:
    text = base64.urlsafe_b64encode(raw).decode()
    return text if pad else text.rstrip("=")


def key_forms(key: bytes) -> list[str]:
    """Every way key material could leak into a message or repr."""
    return [
        key.hex(),
        b64u(key),
        base64.b64encode(key).decode().rstrip("="),
        repr(key)[2:-1],
        key.decode("latin-1"),
    ]


def decode_body(blob: bytes) -> tuple[bytes, bytes]:
    header, _, body = blob.rpartition(b".")
    return header, base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4))


@pytest.fixture
def key() -> bytes:
    return KeyRing.generate_key()


def test_round_trip_and_blob_format(key: bytes) -> None:
    ring = KeyRing([("k1", key)])
    blob = ring.seal(b"secret payload", AD)
    assert blob.startswith(b"v1.k1.")
    assert b"secret payload" not in blob
    assert ring.open(blob, AD) == b"secret payload"
    _, raw = decode_body(blob)
    assert len(raw) == 12 + len(b"secret payload") + 16  # nonce || ciphertext || tag


def test_each_seal_uses_a_fresh_nonce(key: bytes) -> None:
    ring = KeyRing([("k1", key)])
    first, second = ring.seal(b"same", AD), ring.seal(b"same", AD)
    assert decode_body(first)[1][:12] != decode_body(second)[1][:12]


def test_wrong_associated_data_fails(key: bytes) -> None:
    ring = KeyRing([("k1", key)])
    blob = ring.seal(b"secret", AD)
    with pytest.raises(DecryptError):
        ring.open(blob, AD.replace(b"alice", b"mallory"))


def test_every_flipped_byte_fails(key: bytes) -> None:
    ring = KeyRing([("k1", key)])
    blob = ring.seal(b"secret", AD)
    header, raw = decode_body(blob)
    for i in range(len(raw)):
        tampered = bytearray(raw)
        tampered[i] ^= 0x01
        forged = header + b"." + b64u(bytes(tampered)).encode()
        with pytest.raises(DecryptError):
            ring.open(forged, AD)


def test_non_canonical_encoding_of_the_same_bytes_is_rejected(key: bytes) -> None:
    ring = KeyRing([("k1", key)])
    blob = ring.seal(b"x" * 5, AD)  # 12 + 5 + 16 = 33 bytes: canonical base64 needs no padding
    padded = blob + b"="
    with pytest.raises(DecryptError):
        ring.open(padded, AD)
    blob = ring.seal(b"x" * 6, AD)  # 34 bytes: the last character carries 4 unused bits
    last = blob[-1:]
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    sibling = bytes([alphabet[alphabet.index(last) ^ 0x01]])  # differs only in an unused bit
    assert decode_body(blob[:-1] + sibling)[1] == decode_body(blob)[1]
    with pytest.raises(DecryptError):
        ring.open(blob[:-1] + sibling, AD)


def test_unknown_kid_fails(key: bytes) -> None:
    blob = KeyRing([("old", key)]).seal(b"secret", AD)
    other = KeyRing([("new", KeyRing.generate_key())])
    with pytest.raises(DecryptError, match="unknown key id"):
        other.open(blob, AD)


def test_kid_swapped_to_another_known_key_fails(key: bytes) -> None:
    ring = KeyRing([("a", key), ("b", KeyRing.generate_key())])
    blob = ring.seal(b"secret", AD)
    with pytest.raises(DecryptError):
        ring.open(blob.replace(b"v1.a.", b"v1.b.", 1), AD)


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"v1",
        b"v1.k1",
        b"v2.k1.AAAA",
        b"v1.k1.!!!!",
        b"v1.k1.AAAA",  # too short to hold a nonce and a tag
        b"v1.bad kid.AAAA",
        b"v1.k1.AAAA.extra",
        b"v1.k1.\xff\xfe",
    ],
)
def test_malformed_blobs_fail(key: bytes, blob: bytes) -> None:
    with pytest.raises(DecryptError):
        KeyRing([("k1", key)]).open(blob, AD)


def test_rotation_old_key_still_opens_new_key_seals(key: bytes) -> None:
    old = KeyRing([("2024", key)])
    old_blob = old.seal(b"before rotation", AD)
    rotated = KeyRing([("2025", KeyRing.generate_key()), ("2024", key)])
    assert rotated.open(old_blob, AD) == b"before rotation"
    new_blob = rotated.seal(b"after rotation", AD)
    assert KeyRing.kid_of(new_blob) == "2025" == rotated.primary_kid
    assert KeyRing.kid_of(old_blob) == "2024"
    with pytest.raises(DecryptError):
        old.open(new_blob, AD)


def test_stale_blobs_are_those_of_another_known_format_kid(key: bytes) -> None:
    old = KeyRing([("2024", key)])
    rotated = KeyRing([("2025", KeyRing.generate_key()), ("2024", key)])
    old_blob, new_blob = old.seal(b"x", AD), rotated.seal(b"x", AD)
    assert rotated.is_stale(old_blob) and not rotated.is_stale(new_blob)
    assert not rotated.is_stale(b"not a blob")  # malformed: nothing to re-seal
    # The prefix a backend matches to find current blobs without parsing each one.
    assert new_blob.startswith(rotated.primary_prefix) and not old_blob.startswith(rotated.primary_prefix)
    assert rotated.primary_prefix == b"v1.2025."


def test_kid_of_malformed_is_none() -> None:
    assert KeyRing.kid_of(b"not a blob") is None
    assert KeyRing.kid_of(b"v1.bad kid.AAAA") is None


@pytest.mark.parametrize("kid", ["", "a" * 33, "has space", "dot.ted", "colon:", "é"])
def test_invalid_kid_rejected(key: bytes, kid: str) -> None:
    with pytest.raises(ValueError, match="key id") as info:
        KeyRing([(kid, key)])
    assert all(form not in str(info.value) for form in key_forms(key))


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_wrong_key_length_rejected_without_showing_the_key(length: int) -> None:
    bad = bytes(range(65, 65 + length))  # printable, so a leak would be visible in the message
    with pytest.raises(ValueError, match="32 bytes") as info:
        KeyRing([("k1", bad)])
    if length:
        assert all(form not in str(info.value) for form in key_forms(bad))


def test_duplicate_kid_and_empty_ring_rejected(key: bytes) -> None:
    with pytest.raises(ValueError, match="duplicate"):
        KeyRing([("k1", key), ("k1", KeyRing.generate_key())])
    with pytest.raises(ValueError, match="at least one"):
        KeyRing([])


def test_parse_with_and_without_padding(key: bytes) -> None:
    other = KeyRing.generate_key()
    ring = KeyRing.parse(f"new:{b64u(key)}, old:{b64u(other, pad=True)}")
    assert ring.kids == ("new", "old")
    assert ring.primary_kid == "new"
    blob = KeyRing([("old", other)]).seal(b"x", AD)
    assert ring.open(blob, AD) == b"x"
    assert KeyRing([("new", key)]).open(ring.seal(b"y", AD), AD) == b"y"


@pytest.mark.parametrize(
    "spec_template",
    [
        "{key}",  # no kid: the key would land in the kid slot
        "k1:{key}!",
        "k1:{key}+/",  # standard, not url-safe, alphabet
        "k1:{short}",
        "bad kid:{key}",
        "{key}:{key}",
    ],
)
def test_parse_errors_never_echo_key_material(key: bytes, spec_template: str) -> None:
    spec = spec_template.format(key=b64u(key), short=b64u(key[:31]))
    with pytest.raises(ValueError) as info:
        KeyRing.parse(spec)
    assert all(form not in str(info.value) for form in [*key_forms(key), b64u(key[:31])])


@pytest.mark.parametrize("spec", ["", " , ", ","])
def test_parse_empty_spec(spec: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        KeyRing.parse(spec)


def test_repr_shows_no_key_material(key: bytes) -> None:
    ring = KeyRing([("k1", key), ("k0", KeyRing.generate_key())])
    text = repr(ring)
    assert "k1" in text and "k0" in text
    assert all(form not in text for form in key_forms(key))


def test_generate_key() -> None:
    first, second = KeyRing.generate_key(), KeyRing.generate_key()
    assert len(first) == len(second) == 32
    assert first != second
