"""Two MCP app instances sharing Redis, for the token-lifecycle tests and the refresh benchmark.

- one mock-providers app (dev AS, MockHub, MockGoogle, MockSlack, MockKeys) on its own port;
- two `create_app` instances on their own ports, with the same `public_url` (as behind a proxy:
  the public URL is instance 0's origin, so browsers land there), the same Redis `redis_prefix`
  and distinct `replica_id`s. Tests talk to each instance directly (`stack.instances[i]` has
  `.data_dir` and `.mcp_url`, what `mock_providers.testing.client.mcp_client` needs).

Providers: `mockhub` (from the demo, plus its RFC 7009 endpoint), `github` (preset pointed at
MockHub), `google` (preset pointed at MockGoogle), `slack` (preset pointed at MockSlack, also
installing a bot so that the response carries a bot token next to the user's), `keys` (API key,
checked at MockKeys). Client secrets reach `build_provider` through its `environ` argument.

The servers run in a background thread with their own event loop; test code opens its own
store on the same Redis prefix (`async with stack.store() as store`), in its own loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis
from mcp import Client
from mcp.shared.exceptions import UrlElicitationRequiredError
from starlette.applications import Starlette

from mock_providers import create_mock_providers_app
from mock_providers.demo import Demo, build_dev_setup
from mock_providers.testing.browser import Browser
from mock_providers.testing.client import Recorder, accept, legacy_elicitation, mcp_client
from mock_providers.testing.servers import HOST, ThreadedServers, free_port
from service.app import create_app
from service.providers.catalogue import build_provider
from service.settings import Settings
from token_store import Connection, KeyRing, Store, UserRef, open_store

# `keys`: an API-key service, checked at MockKeys.
API_KEY_SERVICE: dict[str, Any] = {
    "kind": "api_key",
    "display_name": "MockKeys",
    "api_key_header": "X-API-Key",
    "api_key_format": "{key}",
}
PROVIDER_PATHS = ("/mockhub", "/mockgoogle", "/mockslack", "/mockkeys")
WAIT_SECONDS = 10.0  # waiting for what the server thread does
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379  # the Redis the tests and benchmarks share
REDIS_URL = f"redis://{REDIS_HOST}:{REDIS_PORT}/0"

# Hooks that add test-only tools: called with each MCP app before the servers start.
ToolHook = Callable[[Starlette], None]


@dataclass
class Instance:
    """One MCP app instance (a "replica"), reachable directly on its own port."""

    name: str
    app: Starlette
    port: int
    data_dir: Path

    @property
    def origin(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def mcp_url(self) -> str:
        return f"{self.origin}/mcp"

    @property
    def settings(self) -> Settings:
        settings: Settings = self.app.state.runtime.settings
        return settings


@dataclass
class LifecycleStack:
    root: Path
    http_timeout: float = 2.0
    tools: Sequence[ToolHook] = ()
    redis_url: str = REDIS_URL
    prefix: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex}:")
    ports: tuple[int, int] = field(default_factory=lambda: (free_port(), free_port()))
    providers_port: int = field(default_factory=free_port)
    # Settings both instances get on top of the stack's own (for example a webhook receiver).
    settings_overrides: dict[str, Any] = field(default_factory=dict)
    instances: list[Instance] = field(init=False, default_factory=list)
    demo: Demo = field(init=False)
    providers_app: Starlette = field(init=False)
    _threaded: ThreadedServers | None = field(init=False, default=None)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def public_url(self) -> str:
        return f"http://{HOST}:{self.ports[0]}"

    @property
    def providers_url(self) -> str:
        return f"http://{HOST}:{self.providers_port}"

    @property
    def settings(self) -> Settings:
        return self.instances[0].settings

    @property
    def mockhub(self) -> Any:
        return self.providers_app.state.mockhub

    @property
    def mockgoogle(self) -> Any:
        return self.providers_app.state.mockgoogle

    @property
    def mockslack(self) -> Any:
        return self.providers_app.state.mockslack

    @property
    def mockkeys(self) -> Any:
        return self.providers_app.state.mockkeys

    def user(self, sub: str) -> UserRef:
        """The MCP user a dev-AS token for `sub` stands for."""
        return UserRef(self.demo.settings.auth_issuer, sub)

    # --- start / stop --------------------------------------------------------------------------

    def start(self) -> LifecycleStack:
        demo = build_dev_setup(
            self.public_url, self.providers_url, self.data_dir, presets=True, http_timeout=self.http_timeout
        )
        self.demo = demo
        base = demo.settings
        self.providers_app = create_mock_providers_app(demo.providers)
        keys_spec = API_KEY_SERVICE | {"userinfo_url": f"{self.providers_url}/mockkeys/me"}
        keys = build_provider("keys", keys_spec, environ={})
        mockhub = base.providers["mockhub"].model_copy(
            update={"revocation_url": f"{self.providers_url}/mockhub/revoke"}
        )
        apps: list[tuple[Any, int]] = [(self.providers_app, self.providers_port)]
        for i, port in enumerate(self.ports):
            settings = base.replace(
                providers={**base.providers, "mockhub": mockhub, "keys": keys},
                store_url=self.redis_url,
                redis_prefix=self.prefix,
                replica_id=f"mcp-{i + 1}",
                port=port,
                **self.settings_overrides,
            ).require_safe_to_serve()
            app = create_app(settings)
            for hook in self.tools:
                hook(app)
            self.instances.append(Instance(settings.replica_id, app, port, self.data_dir))
            apps.append((app, port))
        self._threaded = ThreadedServers(apps)
        self._threaded.start()
        self._wait_subscribed()
        return self

    def _wait_subscribed(self) -> None:
        """Both instances listen for completions on Redis before any flow starts."""
        deadline = time.monotonic() + 10
        for instance in self.instances:
            bus = instance.app.state.runtime.completions
            while not bus.subscribed.is_set():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{instance.name} did not subscribe to completions")
                time.sleep(0.02)

    def stop(self) -> None:
        try:
            if self._threaded is not None:
                self._threaded.stop()
        finally:
            self.delete_keys()

    def delete_keys(self) -> None:
        """Delete every key under the prefix."""
        client = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        try:
            keys = list(client.scan_iter(match=_glob_escape(self.prefix) + "*", count=500))
            if keys:
                client.unlink(*keys)
        finally:
            client.close()

    # --- direct access for tests ---------------------------------------------------------------

    @asynccontextmanager
    async def store(self) -> AsyncIterator[Store]:
        """A store on the instances' Redis prefix and keys, opened in the caller's event loop."""
        opened = await open_store(
            self.redis_url, KeyRing.parse(self.settings.encryption_keys), prefix=self.prefix
        )
        try:
            yield opened
        finally:
            await opened.close()

    def raw_values(self) -> list[bytes]:
        """Every key under the prefix: its name, its DUMP and its plain contents (by type)."""
        # Any: redis-py types replies as bytes | str (decode_responses), here always bytes.
        client: Any = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        values: list[bytes] = []
        try:
            for name in client.scan_iter(match=_glob_escape(self.prefix) + "*", count=500):
                values.append(name)
                values.append(client.dump(name) or b"")
                kind = client.type(name).decode()
                if kind == "string":
                    values.append(client.get(name) or b"")
                elif kind == "hash":
                    for field_name, value in client.hgetall(name).items():
                        values += [field_name, value]
                elif kind == "set":
                    values += list(client.smembers(name))
                elif kind == "zset":
                    values += [member for member, _ in client.zrange(name, 0, -1, withscores=True)]
                elif kind == "list":
                    values += list(client.lrange(name, 0, -1))
        finally:
            client.close()
        return values


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


# --- flows ---------------------------------------------------------------------------------------


@asynccontextmanager
async def legacy_client(instance: Instance, user: str) -> AsyncIterator[tuple[Client, Recorder]]:
    async with mcp_client(instance, user, "legacy", on_url=accept) as opened:
        yield opened


async def elicitation_of(
    client: Client, tool: str = "whoami", args: dict[str, Any] | None = None
) -> UrlElicitationRequiredError:
    """Call `tool` expecting the legacy -32042 answer; return it."""
    return await legacy_elicitation(client, tool, args)


async def wait_completed(recorder: Recorder, elicitation_id: str | None) -> None:
    """Until the client received notifications/elicitation/complete for `elicitation_id`."""
    assert elicitation_id is not None
    await recorder.wait_completed(elicitation_id, timeout=WAIT_SECONDS)


async def complete_flow(
    client: Client,
    recorder: Recorder,
    browser: Browser,
    user: str,
    *,
    login: str = "octocat",
    tool: str = "whoami",
    args: dict[str, Any] | None = None,
) -> Any:
    """-32042, the browser walks login + confirmation + consent, the completion arrives, retry.
    Returns the retried tool result (asserted not to be an error)."""
    error = await elicitation_of(client, tool, args)
    [elicitation] = error.elicitations
    page = await browser.complete_connect(elicitation.url, username=user, login=login)
    assert page.status_code == 200, page.text
    await wait_completed(recorder, elicitation.elicitation_id)
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result
    return result


async def connect(
    instance: Instance,
    user: str,
    *,
    login: str = "octocat",
    tool: str = "whoami",
    args: dict[str, Any] | None = None,
) -> Any:
    """A whole legacy connect flow for `user` on `instance` with its own client and browser."""
    async with Browser() as browser, legacy_client(instance, user) as (client, recorder):
        return await complete_flow(client, recorder, browser, user, login=login, tool=tool, args=args)


async def expire_stored(store: Store, user: UserRef, provider: str, account: str | None = None) -> Connection:
    """Rewrite the stored token set as expired (compare-and-set on `updated_at`); the new record."""
    current = await store.get_connection(user, provider, account)
    assert current is not None, f"no {provider} connection for {user.sub}"
    expired = replace(current, tokens=replace(current.tokens, expires_at=time.time() - 30))
    assert await store.replace_connection(expired, expected_updated_at=current.updated_at)
    return expired


def refreshes_since(records: Sequence[Any], mark: int) -> int:
    """Refresh requests among a provider's `token_requests` after index `mark`."""
    return sum(1 for r in records[mark:] if r.grant_type == "refresh_token")
