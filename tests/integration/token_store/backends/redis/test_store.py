"""Redis-only store checks, against the shared Redis at 127.0.0.1:6379 under a fresh key prefix.

Key layout and TTLs, round trips per call, the atomic commands used, values at rest, records
edited under the store, and open_store wiring. The backend-independent contract is in
test_store_contract.py; faults (server down, paused, restarted, persistence, ACL) are in
test_store_redis_faults.py. Skipped when Redis is unreachable, failed instead when CI is set.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from tests.support.store_contract import (
    ACL_RULES,
    ALICE,
    BOB,
    REDIS_URL,
    T0,
    RedisHarness,
    Wire,
    encoded_forms,
    free_port,
    make_connection,
    make_elicitation,
    make_state,
    make_tokens,
    reach,
    record_wire,
    redis_prefix,
    redis_server,
    state_digest,
    user_tag,
)
from token_store import (
    ConnectionStatus,
    Deletion,
    ElicitationStatus,
    KeyRing,
    RedisStore,
    SealedConnection,
    StoreUnavailable,
    TooManyPending,
    UserRef,
    codec,
    open_store,
)
from token_store.models import DELETIONS_KEPT
from token_store.store_copy import Change, Outcome, copy_unless_deleted


@pytest.fixture
async def harness() -> AsyncIterator[RedisHarness]:
    with redis_prefix() as prefix:
        h = RedisHarness(REDIS_URL, prefix)
        try:
            yield h
        finally:
            for opened in h.stores:
                await opened.close()
            h.cleanup()


@pytest.fixture
async def store(harness: RedisHarness, keyring: KeyRing) -> RedisStore:
    opened = await harness.open(keyring)
    assert isinstance(opened, RedisStore)
    return opened  # closed by the harness fixture


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Wire:
    return record_wire(monkeypatch)


# --- key layout and TTLs --------------------------------------------------------------------


async def test_every_key_that_is_not_a_token_has_a_ttl(store: RedisStore, harness: RedisHarness) -> None:
    await store.put_connection(make_connection())
    await store.put_connection(make_connection(BOB, "google", "x"))
    done, opened = make_elicitation(), make_elicitation(BOB)
    for e in (done, opened, make_elicitation()):
        await store.create_elicitation(e, max_live_per_user=5)
    await reach(store, done, ElicitationStatus.COMPLETE)
    await store.transition_elicitation(opened.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    await store.put_oauth_state(make_state())
    taken = make_state()
    await store.put_oauth_state(taken)
    await store.take_oauth_state(taken.state)
    await store.put_nonce("n1", ttl_seconds=60)
    await store.put_nonce("n2", ttl_seconds=60)
    await store.take_nonce("n2")
    await store.put_nonce("s1", ttl_seconds=60, slot="question")
    await store.put_nonce("s2", ttl_seconds=60, slot="question")
    await store.set_connection_status(make_connection().key, ConnectionStatus.REFRESHING)
    assert await store.replace_connection(replace(make_connection(), updated_at=T0 + 1), T0)
    assert await store.acquire_lock("held", ttl_seconds=60)
    released = await store.acquire_lock("released", ttl_seconds=60)
    assert released is not None and await store.release_lock("released", released)
    await store.reencrypt_all()

    kinds: dict[str, int] = {}
    for key in harness.redis_keys():
        name = key.decode().removeprefix(harness.prefix)
        kind = name.split(":", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
        pttl = harness.raw.pttl(key)
        if kind in ("conn", "user"):  # token sets and their index: kept until deleted
            assert pttl == -1, name
        else:
            assert pttl > 0, f"{name} has no TTL"
    assert kinds == {
        "conn": 2,
        "user": 2,
        "elic": 3,
        "elic-user": 2,
        "state": 1,
        "nonce": 2,  # n1, and s2 (which replaced s1 in its slot)
        "nonce-slot": 1,
        "lock": 1,
    }


async def test_key_names_and_ttls_follow_the_documented_layout(
    store: RedisStore, harness: RedisHarness
) -> None:
    p, u = harness.prefix, user_tag(ALICE)
    conn = make_connection(provider="git:hub", account="1")  # a provider may contain ':'
    await store.put_connection(conn)
    assert harness.raw.hkeys(f"{p}conn:{u}:git:hub") == [b"1"]
    assert harness.raw.smembers(f"{p}user:{u}:providers") == {b"git:hub"}
    value = json.loads(harness.raw.hget(f"{p}conn:{u}:git:hub", "1") or b"")
    assert set(value) == {
        "iss",
        "sub",
        "blob",
        "label",
        "connected_at",
        "updated_at",
        "status",
        "refreshed_at",
    }
    assert (value["status"], value["refreshed_at"]) == ("ok", None)

    short, long = make_elicitation(ttl=100), make_elicitation(ttl=300)
    await store.create_elicitation(long, max_live_per_user=5)
    await store.create_elicitation(short, max_live_per_user=5)
    assert 99_000 < harness.raw.pttl(f"{p}elic:{short.id}") <= 100_000
    assert 299_000 < harness.raw.pttl(f"{p}elic-user:{u}") <= 300_000  # the latest expiry, not the last
    assert harness.raw.zscore(f"{p}elic-user:{u}", short.id) == short.expires_at

    state = make_state(ttl=120)
    await store.put_oauth_state(state)
    assert 119_000 < harness.raw.pttl(f"{p}state:{state_digest(state.state)}") <= 120_000
    await store.put_nonce("n", ttl_seconds=30)
    assert 29_000 < harness.raw.pttl(f"{p}nonce:{state_digest('n')}") <= 30_000
    await store.put_nonce("m", ttl_seconds=30, slot="a question")
    slot_key = f"{p}nonce-slot:{state_digest('a question')}"
    assert harness.raw.get(slot_key) == state_digest("m").encode()  # a hash, never the slot or nonce
    assert 29_000 < harness.raw.pttl(slot_key) <= 30_000

    owner = await store.acquire_lock("refresh:alice:github:1", ttl_seconds=45)
    lock_key = f"{p}lock:{hashlib.sha256(b'refresh:alice:github:1').hexdigest()}"
    assert harness.lock_key("refresh:alice:github:1") == lock_key
    assert harness.raw.get(lock_key) == (owner or "").encode()
    assert 44_000 < harness.raw.pttl(lock_key) <= 45_000


async def test_deletions_are_remembered_per_user_and_provider_for_the_copy_window(
    store: RedisStore, harness: RedisHarness
) -> None:
    p, u = harness.prefix, user_tag(ALICE)
    conn = make_connection(provider="git:hub")
    await store.put_connection(conn)
    assert await store.delete_connection(conn.key)
    gone = f"{p}gone:{u}:git:hub"
    assert json.loads(harness.raw.hget(gone, "1") or b"") == {
        "iss": ALICE.iss,
        "sub": ALICE.sub,
        "deleted_at": harness.clock.now,
    }
    kept_ms = DELETIONS_KEPT * 1000
    assert kept_ms - 60_000 < harness.raw.pttl(gone) <= kept_ms
    # An entry past DELETIONS_KEPT goes with the next deletion in the hash.
    harness.clock.advance(DELETIONS_KEPT)
    await store.put_connection(make_connection(provider="git:hub", account="2"))
    assert await store.delete_connection(make_connection(provider="git:hub", account="2").key)
    assert harness.raw.hkeys(gone) == [b"2"]


async def test_a_copy_step_is_written_only_over_what_it_read(
    store: RedisStore, harness: RedisHarness, keyring: KeyRing
) -> None:
    """A user disconnects on the target between the copy's read and its write: the write is
    refused, and the step decides again on what is there now, so the grant stays deleted."""
    conn = make_connection()
    await store.put_connection(conn)
    incoming = codec.seal_connection(keyring, replace(conn, tokens=make_tokens(), updated_at=T0 + 60))
    copy = copy_unless_deleted(incoming)
    seen: list[tuple[object, object]] = []

    def decide_while_a_user_disconnects(held: SealedConnection | None, deleted: Deletion | None) -> Change:
        seen.append((held, deleted))
        if len(seen) == 1:  # what delete_connection does, right after the copy read
            harness.raw.hdel(harness.conn_key(conn.key), conn.key.account)
            gone = f"{harness.prefix}gone:{user_tag(ALICE)}:github"
            value = {"iss": ALICE.iss, "sub": ALICE.sub, "deleted_at": T0 + 30}
            harness.raw.hset(gone, conn.key.account, json.dumps(value))
        return copy(held, deleted)

    change = await store.change_connection(conn.key, decide_while_a_user_disconnects)
    assert change.outcome is Outcome.DELETED
    assert seen[1] == (None, Deletion(conn.key, T0 + 30))
    assert await store.get_connection(ALICE, "github") is None


async def test_finished_and_expired_elicitations_leave_the_live_set(
    store: RedisStore, harness: RedisHarness
) -> None:
    live_set = f"{harness.prefix}elic-user:{user_tag(ALICE)}"
    done, failed, opened, short = (
        make_elicitation(),
        make_elicitation(),
        make_elicitation(),
        make_elicitation(ttl=10),
    )
    for e in (done, failed, opened, short):
        await store.create_elicitation(e, max_live_per_user=10)
    await reach(store, done, ElicitationStatus.COMPLETE)
    await store.transition_elicitation(failed.id, ElicitationStatus.PENDING, ElicitationStatus.FAILED)
    await store.transition_elicitation(opened.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    assert {m.decode() for m in harness.raw.zrange(live_set, 0, -1)} == {opened.id, short.id}
    # The finished records themselves stay readable until they expire.
    assert (await store.get_elicitation(done.id)) is not None
    harness.clock.advance(10)
    await store.create_elicitation(make_elicitation(), max_live_per_user=10)  # prunes expired members
    assert short.id.encode() not in harness.raw.zrange(live_set, 0, -1)
    assert harness.raw.zcard(live_set) == 2


async def test_transition_keeps_the_record_ttl(store: RedisStore, harness: RedisHarness) -> None:
    e = make_elicitation(ttl=200)
    await store.create_elicitation(e, max_live_per_user=5)
    await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    assert 199_000 < harness.raw.pttl(f"{harness.prefix}elic:{e.id}") <= 200_000


# --- round trips and commands ---------------------------------------------------------------


@pytest.mark.parametrize("account", [None, "2"])
async def test_get_connection_is_one_round_trip(
    store: RedisStore, harness: RedisHarness, wire: Wire, account: str | None
) -> None:
    conns = [make_connection(account=str(i), updated_at=T0 + i) for i in range(1, 4)]
    for conn in conns:
        await store.put_connection(conn)
    # The newest one fails to decrypt, so the answer comes from the fallback, still in the same trip.
    harness.write_blob(conns[2].key, harness.read_blob(conns[0].key))
    wire.writes.clear()
    assert await store.get_connection(ALICE, "github", account) == conns[1]
    assert len(wire.writes) == 1
    assert wire.commands() == [[b"HGETALL" if account is None else b"HGET"]]

    wire.writes.clear()
    assert await store.get_connection(BOB, "github", account) is None
    assert len(wire.writes) == 1


async def test_one_time_records_are_taken_with_getdel(store: RedisStore, wire: Wire) -> None:
    state = make_state()
    await store.put_oauth_state(state)
    await store.put_nonce("n", ttl_seconds=60)
    wire.writes.clear()
    assert await store.take_oauth_state(state.state) == state
    assert await store.take_nonce("n") is True
    assert wire.commands() == [[b"GETDEL"], [b"GETDEL"]]


async def test_new_connection_and_lock_methods_are_single_round_trips(store: RedisStore, wire: Wire) -> None:
    conn = make_connection()
    await store.put_connection(conn)

    async def calls() -> None:
        assert await store.set_connection_status(conn.key, ConnectionStatus.REFRESHING)
        assert await store.set_connection_status(conn.key, ConnectionStatus.OK)
        assert await store.replace_connection(conn, expected_updated_at=conn.updated_at)
        owner = await store.acquire_lock("refresh:x", ttl_seconds=30)
        assert owner is not None
        assert await store.release_lock("refresh:x", owner)

    await calls()  # warm the script cache and the pool
    wire.writes.clear()
    await calls()
    assert wire.commands() == [[b"EVALSHA"], [b"EVALSHA"], [b"EVALSHA"], [b"SET"], [b"EVALSHA"]]
    assert b"NX" in wire.writes[3] and b"PX" in wire.writes[3]


async def test_writes_are_single_atomic_round_trips(store: RedisStore, wire: Wire) -> None:
    conn = make_connection()

    async def writes() -> None:
        e = make_elicitation()
        await store.put_connection(conn)
        await store.create_elicitation(e, max_live_per_user=5)
        await store.transition_elicitation(e.id, ElicitationStatus.PENDING, ElicitationStatus.OPENED)
        await store.delete_connections(ALICE, "github")

    await writes()  # warm the script cache (a server new to a script loads it first) and the pool
    wire.writes.clear()
    await writes()
    assert wire.commands() == [
        [b"EVALSHA"],
        [b"EVALSHA"],
        [b"EVALSHA"],
        [b"EVALSHA"],
    ]


# --- values at rest -------------------------------------------------------------------------


async def test_no_secret_or_identity_in_any_key_or_value(store: RedisStore, harness: RedisHarness) -> None:
    user = UserRef("https://issuer-canary.example", "sub-canary-" + make_tokens().access_token[3:11])
    conn = make_connection(user, account="acct")
    state = make_state()
    nonce = "nonce-canary-" + make_tokens().access_token
    await store.put_connection(conn)
    await store.put_oauth_state(state)
    await store.put_nonce(nonce, ttl_seconds=60)
    await store.create_elicitation(make_elicitation(user), max_live_per_user=5)

    secrets_ = [
        conn.tokens.access_token,
        str(conn.tokens.refresh_token),
        state.code_verifier,
        state.state,
        nonce,
    ]
    raw = harness.raw_bytes()  # key names + DUMP + logical value of every key under the prefix
    assert [s for s in secrets_ if any(form in raw for form in encoded_forms(s.encode()))] == []
    names = b"\n".join(harness.redis_keys())
    for identity in (user.iss, user.sub, state.state, nonce):
        assert identity.encode() not in names


# --- records edited underneath the store ----------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[]",
        b'{"blob": "v1.k1.x"}',
        json.dumps({"iss": "i", "sub": "s", "blob": "%%%", "label": "l", "connected_at": 1, "updated_at": 1}),
        json.dumps(
            {
                "iss": "i",
                "sub": "s",
                "blob": "",
                "label": "l",
                "connected_at": 1,
                "updated_at": 1,
                "status": "x",
            }
        ),
        json.dumps(
            {
                "iss": "i",
                "sub": "s",
                "blob": "",
                "label": "l",
                "connected_at": 1,
                "updated_at": 1,
                "status": 1,
            }
        ),
        json.dumps(
            {"iss": "i", "sub": "s", "blob": "", "label": "l", "connected_at": 1, "updated_at": 1}
            | {"refreshed_at": "soon"}
        ),
    ],
    ids=[
        "not-json",
        "not-object",
        "missing-fields",
        "bad-base64",
        "bad-status",
        "status-type",
        "bad-refreshed",
    ],
)
async def test_malformed_field_reads_as_absent_with_a_warning(
    store: RedisStore, harness: RedisHarness, caplog: pytest.LogCaptureFixture, value: bytes | str
) -> None:
    kept = make_connection(account="kept", updated_at=T0)
    broken = make_connection(account="broken", updated_at=T0 + 1)
    await store.put_connection(kept)
    await store.put_connection(broken)
    harness.write_value(broken.key, value if isinstance(value, bytes) else value.encode())
    with caplog.at_level(logging.WARNING):
        assert await store.get_connection(ALICE, "github", "broken") is None
        assert await store.get_connection(ALICE, "github") == kept
        assert await store.list_connections(ALICE) == [kept]
        assert await store.reencrypt_all() == 0
    text = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "broken" in text
    assert broken.tokens.access_token not in text


async def test_moved_record_with_rewritten_identity_still_reads_as_absent(
    store: RedisStore, harness: RedisHarness
) -> None:
    # An attacker with write access copies Alice's field into Bob's hash and edits iss/sub to Bob:
    # the associated data still names Alice, so Bob gets nothing and rotation leaves it alone.
    conn = make_connection()
    await store.put_connection(conn)
    value = harness.read_value(conn.key)
    moved_key = make_connection(BOB).key
    harness.write_value(moved_key, {**value, "iss": BOB.iss, "sub": BOB.sub})
    harness.raw.sadd(f"{harness.prefix}user:{user_tag(BOB)}:providers", "github")
    assert await store.get_connection(BOB, "github") is None
    assert await store.list_connections(BOB) == []
    assert await store.get_connection(ALICE, "github") == conn


async def test_wrong_type_key_is_store_unavailable_naming_the_operation_only(
    store: RedisStore, harness: RedisHarness
) -> None:
    harness.raw.set(f"{harness.prefix}user:{user_tag(ALICE)}:providers", "not a set")
    with pytest.raises(StoreUnavailable) as info:
        await store.list_connections(ALICE)
    assert str(info.value) == "redis store: list_connections failed (ResponseError)"
    with pytest.raises(StoreUnavailable) as info:
        await store.put_connection(make_connection(provider="secret-provider", account="secret-account"))
    assert str(info.value) == "redis store: put_connection failed (ResponseError)"


async def test_duplicate_ids_are_refused(store: RedisStore) -> None:
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=5)
    with pytest.raises(StoreUnavailable, match="create_elicitation"):
        await store.create_elicitation(e, max_live_per_user=5)
    state = make_state()
    await store.put_oauth_state(state)
    with pytest.raises(StoreUnavailable, match="put_oauth_state"):
        await store.put_oauth_state(state)
    assert await store.take_oauth_state(state.state) == state


async def test_limit_zero_refuses_everything(store: RedisStore) -> None:
    with pytest.raises(TooManyPending):
        await store.create_elicitation(make_elicitation(), max_live_per_user=0)


# --- reencrypt_all details ------------------------------------------------------------------


async def test_reencrypt_keeps_state_ttl_and_skips_taken_or_deleted_records(
    harness: RedisHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    state, taken_state = make_state(ttl=500), make_state(ttl=500)
    deleted = make_connection(account="deleted")
    for s in (state, taken_state):
        await store.put_oauth_state(s)
    await store.put_connection(deleted)
    await store.close()

    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    assert isinstance(store, RedisStore)
    real_seal = KeyRing.seal
    raced = False

    def seal_with_races(self: KeyRing, plaintext: bytes, associated_data: bytes) -> bytes:
        # Meanwhile another replica deletes the connection and consumes one state.
        nonlocal raced
        if not raced:
            raced = True
            harness.raw.hdel(harness.conn_key(deleted.key), "deleted")
            harness.raw.delete(f"{harness.prefix}state:{state_digest(taken_state.state)}")
        return real_seal(self, plaintext, associated_data)

    monkeypatch.setattr(KeyRing, "seal", seal_with_races)
    assert await store.reencrypt_all() == 1  # only `state`: nothing deleted comes back
    assert harness.raw.hlen(harness.conn_key(deleted.key)) == 0
    assert harness.read_state_blob(taken_state.state) is None
    state_key = f"{harness.prefix}state:{state_digest(state.state)}"
    assert 490_000 < harness.raw.pttl(state_key) <= 500_000  # the expiry did not move
    assert await store.take_oauth_state(state.state) == state


# --- opening --------------------------------------------------------------------------------


async def test_open_store_picks_redis_and_uses_the_prefix(keyring: KeyRing) -> None:
    with redis_prefix() as prefix:
        store = await open_store(REDIS_URL, keyring, prefix=prefix)
        try:
            assert isinstance(store, RedisStore)
            await store.put_connection(make_connection())
            raw = redis.Redis.from_url(REDIS_URL)
            try:
                assert raw.exists(f"{prefix}conn:{user_tag(ALICE)}:github") == 1
            finally:
                raw.close()
        finally:
            await store.close()


async def test_prefixes_isolate_stores(keyring: KeyRing) -> None:
    with redis_prefix() as first, redis_prefix() as second:
        a = await RedisStore.open(REDIS_URL, keyring, prefix=first)
        b = await RedisStore.open(REDIS_URL, keyring, prefix=second)
        try:
            await a.put_connection(make_connection())
            await a.put_nonce("n", ttl_seconds=60)
            assert await b.list_connections(ALICE) == []
            assert await b.take_nonce("n") is False
            assert await b.reencrypt_all() == 0
            assert await a.take_nonce("n") is True
        finally:
            await a.close()
            await b.close()


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
async def test_unreachable_redis_is_store_unavailable_without_the_password(
    keyring: KeyRing, scheme: str
) -> None:
    url = f"{scheme}://user:hunter2@127.0.0.1:{free_port()}/0"
    with pytest.raises(StoreUnavailable) as info:
        await open_store(url, keyring)
    assert "hunter2" not in str(info.value)
    assert str(info.value) == "redis store: ping failed (ConnectionError)"


async def test_tls_to_a_plain_text_server_fails_closed(keyring: KeyRing) -> None:
    with redis_prefix() as prefix, pytest.raises(StoreUnavailable):
        await open_store(REDIS_URL.replace("redis://", "rediss://"), keyring, prefix=prefix)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:6379", "redis://:hunter2@127.0.0.1:notaport/0", "redis://:hunter2@h/0?db=x"]
)
async def test_bad_redis_urls_are_value_errors_without_the_password(keyring: KeyRing, url: str) -> None:
    with pytest.raises(ValueError) as info:
        await RedisStore.open(url, keyring)
    assert "hunter2" not in str(info.value)


async def test_empty_prefix_is_refused(keyring: KeyRing) -> None:
    with pytest.raises(ValueError, match="prefix"):
        await RedisStore.open(REDIS_URL, keyring, prefix="")


async def test_glob_characters_in_the_prefix_match_literally(keyring: KeyRing) -> None:
    # reencrypt_all SCANs by prefix: a '*' in one store's prefix must not reach another store's keys.
    with redis_prefix() as base:
        star = await RedisStore.open(REDIS_URL, keyring, prefix=base + "*:")
        plain = await RedisStore.open(REDIS_URL, keyring, prefix=base + "x:")
        raw = redis.Redis.from_url(REDIS_URL)
        try:
            await star.put_connection(make_connection())
            await plain.put_connection(make_connection())
            found = list(raw.scan_iter(match=star._keys.pattern("conn"), count=500))
            assert [k.decode().startswith(base + "*:conn:") for k in found] == [True]
        finally:
            raw.close()
            await star.close()
            await plain.close()


# --- status, compare-and-set and locks ------------------------------------------------------


async def test_value_written_before_status_existed_reads_as_ok_and_takes_a_status(
    store: RedisStore, harness: RedisHarness
) -> None:
    conn = replace(make_connection(), connected_at=T0 + 0.1, updated_at=T0 + 1 / 3)
    await store.put_connection(conn)
    old_value = harness.read_value(conn.key)
    del old_value["status"], old_value["refreshed_at"]
    old_raw = json.dumps(old_value, separators=(",", ":")).encode()  # the previous layout, verbatim
    harness.write_value(conn.key, old_raw)
    assert await store.get_connection(ALICE, "github") == conn  # status ok, never refreshed

    assert await store.set_connection_status(conn.key, ConnectionStatus.REVOKED) is True
    # Appended, nothing else touched: the times keep every digit (no re-encoding by Lua's cjson).
    assert harness.raw.hget(harness.conn_key(conn.key), "1") == old_raw[:-1] + b',"status":"revoked"}'
    assert await store.get_connection(ALICE, "github") == replace(conn, status=ConnectionStatus.REVOKED)

    harness.write_value(conn.key, old_raw)
    refreshed = replace(conn, tokens=make_tokens(), updated_at=T0 + 2, refreshed_at=T0 + 2)
    assert await store.replace_connection(refreshed, expected_updated_at=conn.updated_at) is True
    assert await store.get_connection(ALICE, "github") == refreshed


async def test_set_connection_status_edits_only_the_status_member(
    store: RedisStore, harness: RedisHarness
) -> None:
    # A label that spells the member, plainly and with backslashes: JSON escapes both inside the string.
    label = 'a "status":"ok" b \\"status\\":"ok" c'
    conn = replace(make_connection(), account_label=label, refreshed_at=T0 + 2 / 3)
    await store.put_connection(conn)
    before = harness.raw.hget(harness.conn_key(conn.key), "1")
    assert isinstance(before, bytes) and before.count(b'"status":"ok"') == 1
    assert await store.set_connection_status(conn.key, ConnectionStatus.NEEDS_REAUTHORIZATION) is True
    after = harness.raw.hget(harness.conn_key(conn.key), "1")
    assert after == before.replace(b'"status":"ok"', b'"status":"needs_reauthorization"')
    assert await store.get_connection(ALICE, "github") == replace(
        conn, status=ConnectionStatus.NEEDS_REAUTHORIZATION
    )


@pytest.mark.parametrize(
    "value",
    [b"not json", b"[]", b'{"blob": 1}', b'{"blob": "x", "status": 7}', b'{"blob":"x","status":"a b"}'],
    ids=["not-json", "not-object", "blob-type", "status-type", "status-chars"],
)
async def test_set_connection_status_leaves_a_malformed_value_alone(
    store: RedisStore, harness: RedisHarness, value: bytes
) -> None:
    conn = make_connection()
    await store.put_connection(conn)
    harness.write_value(conn.key, value)
    assert await store.set_connection_status(conn.key, ConnectionStatus.REVOKED) is False
    assert await store.replace_connection(conn, expected_updated_at=T0) is False
    assert harness.raw.hget(harness.conn_key(conn.key), "1") == value


async def test_replace_connection_does_not_touch_other_fields_or_the_index(
    store: RedisStore, harness: RedisHarness
) -> None:
    conn, other = make_connection(account="1"), make_connection(account="2")
    await store.put_connection(conn)
    await store.put_connection(other)
    other_raw = harness.raw.hget(harness.conn_key(other.key), "2")
    assert await store.replace_connection(replace(conn, updated_at=T0 + 1), expected_updated_at=T0)
    assert harness.raw.hget(harness.conn_key(other.key), "2") == other_raw
    assert harness.raw.smembers(f"{harness.prefix}user:{user_tag(ALICE)}:providers") == {b"github"}
    # Refused replacements create nothing: no field, no hash, no index entry.
    assert not await store.replace_connection(make_connection(BOB, "google"), expected_updated_at=T0)
    assert harness.raw.exists(f"{harness.prefix}conn:{user_tag(BOB)}:google") == 0
    assert harness.raw.exists(f"{harness.prefix}user:{user_tag(BOB)}:providers") == 0


async def test_reencrypt_all_retries_a_field_whose_status_changed_meanwhile(
    harness: RedisHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_key, new_key = KeyRing.generate_key(), KeyRing.generate_key()
    store = await harness.open(KeyRing([("old", old_key)]))
    conn = make_connection()
    await store.put_connection(conn)
    await store.close()

    store = await harness.open(KeyRing([("new", new_key), ("old", old_key)]))
    real_seal = KeyRing.seal
    raced = False

    def seal_with_a_status_change(self: KeyRing, plaintext: bytes, associated_data: bytes) -> bytes:
        # Another replica marks the connection between reencrypt_all's read and its write-back:
        # that write keeps the old blob, so the compare-and-set fails and the field must be redone.
        nonlocal raced
        if not raced:
            raced = True
            harness.write_value(conn.key, {**harness.read_value(conn.key), "status": "refreshing"})
        return real_seal(self, plaintext, associated_data)

    monkeypatch.setattr(KeyRing, "seal", seal_with_a_status_change)
    assert await store.reencrypt_all() == 1
    assert raced
    assert KeyRing.kid_of(harness.read_blob(conn.key)) == "new"
    assert await store.get_connection(ALICE, "github") == replace(conn, status=ConnectionStatus.REFRESHING)


async def test_locks_expire_by_the_redis_clock_not_the_store_clock(
    store: RedisStore, harness: RedisHarness
) -> None:
    owner = await store.acquire_lock("refresh:x", ttl_seconds=30)
    assert owner is not None
    harness.clock.advance(3600)  # replicas' clocks may disagree; the lock key's PTTL decides
    assert await store.acquire_lock("refresh:x", ttl_seconds=30) is None
    assert await store.release_lock("refresh:x", owner) is True
    owner = await store.acquire_lock("refresh:x", ttl_seconds=0.0001)  # rounded up to 1 ms, not 0
    assert owner is not None
    await harness.outlive_lock(0.001)
    assert harness.raw.exists(harness.lock_key("refresh:x")) == 0


async def test_stale_release_leaves_the_new_owners_key(store: RedisStore, harness: RedisHarness) -> None:
    stale = await store.acquire_lock("refresh:x", ttl_seconds=0.2)
    assert stale is not None
    await harness.outlive_lock(0.2)
    current = await store.acquire_lock("refresh:x", ttl_seconds=30)
    assert current is not None
    assert await store.release_lock("refresh:x", stale) is False
    assert harness.raw.get(harness.lock_key("refresh:x")) == current.encode()
    assert harness.raw.pttl(harness.lock_key("refresh:x")) > 29_000


async def test_minimal_acl_user_can_use_status_replace_and_locks(tmp_path: Path) -> None:
    # The documented ACL (tests/support/store_contract.py: ACL_RULES) covers the scripts' commands too.
    with redis_server(tmp_path / "redis") as server:
        admin = server.client()
        try:
            admin.execute_command("ACL", "SETUSER", "mcp", *ACL_RULES.split())
            admin.execute_command("ACL", "SETUSER", "default", "off")
        finally:
            admin.close()
        url = f"redis://mcp:store-password@127.0.0.1:{server.port}/0"
        store = await RedisStore.open(url, KeyRing([("k1", KeyRing.generate_key())]))
        try:
            conn = make_connection()
            await store.put_connection(conn)
            assert await store.set_connection_status(conn.key, ConnectionStatus.REFRESHING)
            assert await store.replace_connection(replace(conn, updated_at=T0 + 1), expected_updated_at=T0)
            owner = await store.acquire_lock("refresh:x", ttl_seconds=30)
            assert owner is not None
            assert await store.release_lock("refresh:x", owner)
            now = time.time()  # the store's own clock
            e = replace(make_elicitation(), created_at=now, expires_at=now + 600)
            await store.create_elicitation(e, max_live_per_user=1)
            assert await store.live_elicitations(e.user) == [e]
        finally:
            await store.close()


@pytest.mark.parametrize("written", ["5.", ".5", "+5.0", "1.5-3", '"1795526001.5"', "null"])
async def test_complete_keeps_only_a_well_formed_connected_at(
    store: RedisStore, harness: RedisHarness, written: str
) -> None:
    """The complete script copies the stored connected_at as text (no cjson rounding); a value
    edited underneath the store with a number Python's json would not write is not carried into
    the new value, so the reconnect repairs the record instead of keeping it unreadable."""
    conn = make_connection()
    await store.put_connection(conn)
    stored = json.loads(harness.raw.hget(harness.conn_key(conn.key), "1") or b"")
    edited = json.dumps(stored, separators=(",", ":")).replace(
        f'"connected_at":{json.dumps(stored["connected_at"])}', f'"connected_at":{written}'
    )
    harness.write_value(conn.key, edited.encode())
    e = make_elicitation()
    await store.create_elicitation(e, max_live_per_user=1)
    await store.open_elicitation(replace(make_state(), elicitation=e))
    reconnect = replace(conn, tokens=make_tokens(), connected_at=T0 + 50, updated_at=T0 + 51)
    assert await store.complete_elicitation(reconnect, e.id) is not None
    assert await store.get_connection(ALICE, "github", "1") == reconnect
