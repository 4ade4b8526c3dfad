"""Redis Cluster, against the session's private three-primary cluster: a single primary's
connections move to Cluster (`mcp-url-connect store copy-from`, token_store/store_copy.py)
without losing one, also when run again after the switch (tests/integration/token_store/
test_store_copy.py: nor bringing back a deleted one); every key of one user, and the records its
ids name, share one hash slot (`require_slot_tag`), while an id tells nobody without the server's
key whose it is (`SlotTags`); a primary restart fails the calls to its slots cleanly and the same
store works again.

The store contract suite also runs on this cluster (test_store_contract.py, `[cluster]`).
"""

from __future__ import annotations

import asyncio
import base64
import signal
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from service.ops.cli import main
from tests.needs import ClusterGroup, redis_prefix
from tests.support.store_contract import (
    ALICE,
    BOB,
    REDIS_URL,
    SLOT_TAGS,
    T0,
    FakeClock,
    make_connection,
    make_elicitation,
    make_state,
)
from token_store import KeyRing, RedisStore, SlotTags, StoreUnavailable, copy_endpoints, copy_store, slot_tag
from token_store.store_copy import Outcome


@pytest.fixture
async def prefix(cluster_group: ClusterGroup) -> AsyncIterator[str]:
    with redis_prefix() as name:  # the shared single primary's keys under it go afterwards
        yield name
        raw = cluster_group.client()
        try:
            keys = list(raw.scan_iter(match=name + "*", count=500))
            for key in keys:
                raw.unlink(key)
        finally:
            raw.close()


async def test_connections_move_from_a_single_primary_to_cluster(
    cluster_group: ClusterGroup, keyring: KeyRing, prefix: str
) -> None:
    old = await RedisStore.open(REDIS_URL, keyring, prefix=prefix, clock=FakeClock())
    new = await RedisStore.open(cluster_group.url(), keyring, prefix=prefix, clock=FakeClock())
    try:
        conns = [
            make_connection(ALICE, "github", "1"),
            make_connection(ALICE, "github", "2", updated_at=2.0e9),
            make_connection(ALICE, "slack", "1"),
            make_connection(BOB, "github", "7"),
        ]
        for conn in conns:
            await old.put_connection(conn)
        await old.set_default_account(ALICE, "github", "2")
        source, target = copy_endpoints(old, new)
        assert (await copy_store(source, target, now=T0)).counts[Outcome.COPIED] == 4
        assert await new.list_connections(ALICE) == conns[:3]
        assert await new.list_connections(BOB) == conns[3:]
        assert await new.get_connection(ALICE, "github") == conns[1]
        assert await new.get_default_account(ALICE, "github") == "2"

        # Replicas switched: a refresh on the cluster is newer than the old copy, and a connection
        # the old primary got meanwhile is still to copy. Running again keeps the one, adds the other.
        refreshed = replace(conns[0], updated_at=conns[0].updated_at + 60)
        assert await new.replace_connection(refreshed, conns[0].updated_at)
        late = make_connection(BOB, "slack", "9")
        await old.put_connection(late)
        await new.set_default_account(ALICE, "github", "1")
        again = await copy_store(source, target, now=T0 + 60)
        assert (again.counts[Outcome.COPIED], again.counts[Outcome.KEPT]) == (1, 4)
        assert await new.get_connection(ALICE, "github", "1") == refreshed
        assert await new.get_connection(BOB, "slack") == late
        assert await new.get_default_account(ALICE, "github") == "1"
    finally:
        await old.close()
        await new.close()


def test_store_copy_from_command(
    cluster_group: ClusterGroup,
    keyring: KeyRing,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def seed() -> None:
        old = await RedisStore.open(REDIS_URL, keyring, prefix=prefix, clock=FakeClock())
        await old.put_connection(make_connection())
        await old.close()

    asyncio.run(seed())
    environ = {
        "MCPUC_PUBLIC_URL": "https://mcp.example.com",
        "MCPUC_AUTH_ISSUER": "https://as.example.com",
        "MCPUC_LOGIN_CLIENT_ID": "login",
        "MCPUC_SESSION_SECRET": "s" * 40,
        # Values are copied sealed, as they are: the command needs the key ring, never opens them.
        "MCPUC_ENCRYPTION_KEYS": f"k1:{b64(KeyRing.generate_key())}",
        "MCPUC_REQUEST_STATE_KEYS": b64(KeyRing.generate_key()),
        "MCPUC_STORE_URL": cluster_group.url(),
        "MCPUC_REDIS_PREFIX": prefix,
        "MCPUC_OLD_STORE_URL": REDIS_URL,
    }
    monkeypatch.delenv("MCPUC_CONFIG_FILE", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["store", "copy-from"]) == 0
    assert capsys.readouterr().out.startswith("copied 1 connection(s);")

    async def read() -> None:
        new = await RedisStore.open(cluster_group.url(), keyring, prefix=prefix, clock=FakeClock())
        assert [c.key for c in await new.list_connections(ALICE)] == [make_connection().key]
        await new.close()

    asyncio.run(read())


async def test_every_key_of_a_user_and_the_records_its_ids_name_share_one_slot(
    cluster_group: ClusterGroup, keyring: KeyRing, prefix: str
) -> None:
    store = await cluster_store(cluster_group, keyring, prefix)
    try:
        await store.put_connection(make_connection())
        await store.set_default_account(ALICE, "github", "1")
        state = make_state()
        await store.create_elicitation(state.elicitation, max_live_per_user=5)
        assert await store.open_elicitation(state) is not None
        await store.put_nonce(SLOT_TAGS.mint(ALICE), ttl_seconds=60, slot="alice-question")
        await store.put_nonce(SLOT_TAGS.mint(ALICE), ttl_seconds=60, slot="alice-question")
        raw = cluster_group.client()
        try:
            keys = list(raw.scan_iter(match=prefix + "*", count=500))
            slots = {raw.keyslot(key) for key in keys}
        finally:
            raw.close()
        kinds = {key.decode().removeprefix(prefix).split(":")[0] for key in keys}
        assert kinds == {"conn", "user", "elic", "elic-user", "state", "nonce", "nonce-slot"}
        assert len(slots) == 1
    finally:
        await store.close()


async def test_an_id_without_its_users_slot_tag_is_refused_and_other_users_still_work(
    cluster_group: ClusterGroup, keyring: KeyRing, prefix: str
) -> None:
    store = await cluster_store(cluster_group, keyring, prefix)
    try:
        foreign = replace(make_elicitation(ALICE), id=SLOT_TAGS.mint(BOB))
        with pytest.raises(ValueError, match="slot tag"):
            await store.create_elicitation(foreign, max_live_per_user=5)
        assert await store.get_elicitation(foreign.id) is None
        state = make_state()
        with pytest.raises(ValueError, match="slot tag"):
            await store.open_elicitation(replace(state, state=SLOT_TAGS.mint(BOB)))
        bob = make_elicitation(BOB)
        await store.create_elicitation(bob, max_live_per_user=5)
        assert await store.get_elicitation(bob.id) == bob
    finally:
        await store.close()


async def test_an_id_names_its_users_slot_only_to_whoever_holds_the_key(
    cluster_group: ClusterGroup, keyring: KeyRing, prefix: str
) -> None:
    """Alice's ids, states and nonces on Cluster put her records in her hash slot, yet whoever
    sees them and knows the candidate users (each one's `slot_tag` is a public hash of `(iss,
    sub)`) cannot tell they are hers: no id carries her tag in clear, her ids carry different
    tags, and another key unmasks them to other slots. Bob's flow beside hers works."""
    store = await cluster_store(cluster_group, keyring, prefix)
    try:
        ids = [SLOT_TAGS.mint(ALICE) for _ in range(16)]
        for elicitation_id in ids:
            await store.create_elicitation(
                replace(make_elicitation(ALICE), id=elicitation_id), max_live_per_user=20
            )
        raw = cluster_group.client()
        try:
            slots = {raw.keyslot(key) for key in raw.scan_iter(match=prefix + "*", count=500)}
        finally:
            raw.close()
        assert slots == {raw.keyslot(f"{{{slot_tag(ALICE)}}}")}  # every record in Alice's slot
        carried = [elicitation_id[1:5] for elicitation_id in ids]
        candidates = {slot_tag(ALICE), slot_tag(BOB)}
        assert sum(tag in candidates for tag in carried) <= 1  # by chance: 2 in 16384 per id
        assert len(set(carried)) > 1  # two of her ids do not look alike
        guessed = SlotTags(b"not the server's slot tag key!!!")
        assert sum(guessed.slot_of(elicitation_id) == slot_tag(ALICE) for elicitation_id in ids) <= 1
        bob = make_elicitation(BOB)
        await store.create_elicitation(bob, max_live_per_user=5)
        assert await store.get_elicitation(bob.id) == bob
    finally:
        await store.close()


async def test_a_primary_restart_fails_its_calls_cleanly_and_the_same_store_works_again(
    cluster_group: ClusterGroup, keyring: KeyRing, prefix: str
) -> None:
    store = await RedisStore.open(
        cluster_group.url(), keyring, prefix=prefix, clock=FakeClock(), socket_timeout=1.0
    )
    try:
        alice = make_connection()
        await store.put_connection(alice)
        owner = cluster_group.node_for(f"{prefix}conn:{{{slot_tag(ALICE)}}}")
        owner.stop(signal.SIGKILL)  # appendfsync always: what it acknowledged is on disk
        with pytest.raises(StoreUnavailable, match=r"^redis store: get_connection failed \("):
            await store.get_connection(ALICE, "github")
        owner.start()
        cluster_group.wait_ok()
        assert await store.get_connection(ALICE, "github") == alice
        bob = make_connection(BOB)
        await store.put_connection(bob)
        assert await store.get_connection(BOB, "github") == bob
    finally:
        await store.close()


async def cluster_store(cluster_group: ClusterGroup, keyring: KeyRing, prefix: str) -> RedisStore:
    """A store on the cluster that places the ids the suite mints (`SLOT_TAGS`)."""
    return await RedisStore.open(
        cluster_group.url(), keyring, prefix=prefix, clock=FakeClock(), slot_tags=SLOT_TAGS
    )


def b64(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")
