"""Operators' controls end to end on two replicas sharing Redis (mock_providers/testing/replicas.py):
`connections list|revoke` and `keys retire` from the CLI, the admin API on its own port.

Each test connects its own users; another user's connection is checked untouched afterwards.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.mcpserver import Context
from starlette.applications import Starlette

from mock_providers import mint_access_token
from mock_providers.testing.replicas import LifecycleStack, connect, elicitation_of, legacy_client
from service.mcp.provider_session import ProviderSession, uses
from service.ops.admin_api import admin_app
from service.ops.cli import main
from service.runtime import Runtime
from tests.support.lifecycle import running
from token_store import Store

pytestmark = pytest.mark.e2e

ADMIN_PORT = 9471  # never bound: the in-process transport names it as the server's port
ADMIN_AUDIENCE = "https://admin.mcp.example/"  # the admin API's own resource (RFC 8707)


def add_google_tool(app: Starlette) -> None:
    """Test only: a tool at MockGoogle, so a user can have a flow in progress there."""
    server, broker = app.state.mcp_server, app.state.broker

    @server.tool(description="Test only: who am I at MockGoogle.")
    @uses(broker.session, "google")
    async def google_whoami(ctx: Context[Any, Any], api: ProviderSession) -> dict[str, Any]:
        return dict(await api.get_json(api.provider.userinfo_url))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LifecycleStack]:
    yield from running(LifecycleStack(tmp_path_factory.mktemp("operator"), tools=(add_google_tool,)))


@pytest.fixture
def configured(stack: LifecycleStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads the replicas' own settings (what --config and MCPUC_* load for `serve`)."""
    monkeypatch.setattr("service.ops.cli.preamble.load_settings", lambda **_: stack.settings)


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`mcp-url-connect ARGV` (it runs its own event loop: in a thread); exit code, out, err."""
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_connections_list_names_every_users_connections_without_a_secret(
    stack: LifecycleStack, store: Store, configured: None, capsys: pytest.CaptureFixture[str]
) -> None:
    await connect(stack.instances[0], "list-alice", login="alice-login")
    await connect(stack.instances[1], "list-bob", login="bob-login")
    held = [await store.get_connection(stack.user(u), "mockhub") for u in ("list-alice", "list-bob")]

    code, out, _ = await cli(capsys, "connections", "list", "--provider", "mockhub", "--json")
    assert code == 0
    rows = {row["sub"]: row for row in json.loads(out)}
    assert rows["list-alice"]["account_label"] == "alice-login"
    assert rows["list-bob"]["status"] == "ok"
    code, out, _ = await cli(capsys, "connections", "list", "--user", "list-alice")
    assert code == 0 and "list-alice" in out and "list-bob" not in out
    for connection in held:
        assert connection is not None and connection.tokens.refresh_token is not None
        assert connection.tokens.refresh_token not in out and connection.tokens.access_token not in out


async def test_revoke_user_deletes_revokes_and_tells_their_sessions(
    stack: LifecycleStack,
    store: Store,
    configured: None,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    leaver, stayer, hub = "revoke-leaver", "revoke-stayer", stack.mockhub
    await connect(stack.instances[0], leaver)
    await connect(stack.instances[1], stayer)
    held = await store.get_connection(stack.user(leaver), "mockhub")
    assert held is not None
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")

    async with legacy_client(stack.instances[1], leaver) as (client, recorder):
        # The leaver has a session on the other replica, waiting on a flow at MockGoogle.
        [waiting] = (await elicitation_of(client, "google_whoami")).elicitations
        code, out, err = await cli(capsys, "connections", "revoke", "--user", leaver)
        assert code == 0, err
        assert "1 deleted, 1 revoked at the provider, 1 flow(s) in progress ended" in out
        await recorder.wait_completed(waiting.elicitation_id, timeout=10)  # the session was told
        # The live session's next call asks to connect again, as after a disconnect.
        await elicitation_of(client, "whoami")

    assert held.tokens.refresh_token in hub.revoked_tokens
    assert await store.get_connection(stack.user(leaver), "mockhub") is None
    stayed = await store.get_connection(stack.user(stayer), "mockhub")
    assert stayed is not None and stayed.tokens.refresh_token not in hub.revoked_tokens
    async with legacy_client(stack.instances[0], stayer) as (client, _):
        assert not (await client.call_tool("whoami", {})).is_error
    events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_url_connect.audit"]
    [action] = [e for e in events if e["event"] == "operator_revoke_user"]
    assert action["actor"].startswith("cli:") and action["sub"] == leaver and action["deleted"] == 1
    disconnects = [e for e in events if e["event"] == "disconnect" and e["sub"] == leaver]
    assert [e["by"] for e in disconnects] == [f"operator:{action['actor']}"]


async def test_revoke_provider_all_counts_first_then_removes_every_connection_there(
    stack: LifecycleStack, store: Store, configured: None, capsys: pytest.CaptureFixture[str]
) -> None:
    users = [f"incident-{i}" for i in range(3)]
    for i, user in enumerate(users):
        await connect(stack.instances[i % 2], user)
    code, out, _ = await cli(capsys, "connections", "revoke", "--provider", "mockhub", "--all", "--dry-run")
    assert code == 0
    counted = int(out.split()[0])
    assert counted >= len(users)
    assert all([await store.get_connection(stack.user(u), "mockhub") for u in users])  # dry run: kept

    code, out, err = await cli(
        capsys, "connections", "revoke", "--provider", "mockhub", "--all", "--rate", "50", "--json"
    )
    assert code == 0, err
    summary = json.loads(out[out.index("{") :])
    assert summary["deleted"] == summary["revoked_at_provider"] >= len(users)
    assert await store.find_connections("mockhub") == []
    for user in users:
        async with legacy_client(stack.instances[1], user) as (client, _):
            await elicitation_of(client, "whoami")


async def test_keys_retire_refuses_while_a_record_is_sealed_under_the_key(
    stack: LifecycleStack, configured: None, capsys: pytest.CaptureFixture[str]
) -> None:
    await connect(stack.instances[0], "retire-user")
    primary = stack.settings.encryption_keys.split(":", 1)[0]
    code, _, err = await cli(capsys, "keys", "retire", primary)
    assert code == 1 and "primary" in err
    code, out, _ = await cli(capsys, "keys", "retire", "never-used")
    assert code == 0 and "no record is sealed under 'never-used'" in out


async def test_admin_api_revokes_a_user_with_an_admin_bearer_and_audits_who_asked(
    stack: LifecycleStack, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    leaver, stayer, hub = "admin-leaver", "admin-stayer", stack.mockhub
    await connect(stack.instances[0], leaver)
    await connect(stack.instances[1], stayer)
    held = await store.get_connection(stack.user(leaver), "mockhub")
    assert held is not None
    settings = stack.settings.replace(
        admin_port=ADMIN_PORT, admin_audience=ADMIN_AUDIENCE, admin_client_ids=("ops-automation",)
    ).require_safe_to_serve()
    admin_bearer = mint_access_token(
        stack.data_dir,
        "ops-bot",
        audience=ADMIN_AUDIENCE,
        client_id="ops-automation",
        scope=settings.admin_scope,
    )
    caplog.set_level(logging.INFO, logger="mcp_url_connect.audit")
    runtime = Runtime(settings)  # a third replica's admin listener, in process
    async with (
        runtime.running(),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=admin_app(runtime)),
            base_url=f"http://127.0.0.1:{ADMIN_PORT}",
            headers={"Authorization": f"Bearer {admin_bearer}"},
        ) as http,
    ):
        listed = (await http.get("/admin/connections", params={"provider": "mockhub"})).json()
        assert {leaver, stayer} <= {row["sub"] for row in listed["connections"]}
        counted = await http.post("/admin/providers/mockhub/revoke-all", json={"dry_run": True})
        assert counted.status_code == 200 and counted.json()["deleted"] == 0
        done = await http.post("/admin/connections/revoke", json={"sub": leaver})
        assert done.status_code == 200, done.text
        assert done.json()["deleted"] == done.json()["revoked_at_provider"] == 1

    assert held.tokens.refresh_token in hub.revoked_tokens
    assert await store.get_connection(stack.user(leaver), "mockhub") is None
    async with legacy_client(stack.instances[1], stayer) as (client, _):
        assert not (await client.call_tool("whoami", {})).is_error
    async with legacy_client(stack.instances[0], leaver) as (client, _):
        await elicitation_of(client, "whoami")
    events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "mcp_url_connect.audit"]
    ours = [e["event"] for e in events if e.get("actor") == "bearer:ops-bot client:ops-automation"]
    assert ours == ["operator_list", "operator_revoke_provider", "operator_revoke_user"]
