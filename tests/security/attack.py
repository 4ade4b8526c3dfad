"""The attack harness: servers whose every HTTP exchange is recorded, and `attack()`, the context
manager every attack test runs in.

`attack()` snapshots the world before the attack and, when the block ends, asserts:

1. the test stated the outcome it expects (`a.status(...)`, `a.rpc_error(...)`, `a.check(...)`)
   at least once, and no response of the MCP server was a 500 nor did any ERROR log appear;
2. no token was written: the connection records (SQLite or PostgreSQL rows, or Redis `conn:`
   hashes, each with a digest of its sealed blob) are unchanged, unless the test allows
   `new_connections`;
3. no token-endpoint call reached the provider (`mockhub.token_requests`), unless the test allows
   `token_requests`, and none of those succeeded unless it allows `exchanges_ok`;
4. no `notifications/elicitation/complete` announced a success: each one on the wire names a flow
   that the store shows as `failed` (the session that asked is told its flow ended, and its retry
   says why: never a connection), unless the test allows `completions`;
5. no secret in any response of the MCP server (status, headers, body, SSE stream), in anything the
   test passed to `a.observe`, in the Recorders' notifications, in any log line at DEBUG (every
   logger, through `service.observability.redaction.RedactingFilter`), or in the raw store, in plain,
   base64 (every alignment) or URL-encoded form;
6. the MCP bearer never reached a provider (no request to the providers' app carries it).

The canaries are gathered when the block ends, from everything recorded so far: tokens mockhub
issued, codes, states, PKCE verifiers, ID and access tokens of the browser login, client secrets,
demo-secrets.json values, the dev AS private key, every bearer presented at /mcp, cookie values,
and (in logs only) elicitation ids and requestState values.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import hashlib
import json
import logging
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

import httpx
from mcp.shared.exceptions import MCPError

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import Recorder
from mock_providers.testing.servers import HOST, DemoServers
from service.observability.redaction import RedactingFilter
from tests.support.settle import quiet_for

MIN_CANARY = 12  # shorter values would match by accident
# The elicitation id a completion notification names (the SDK writes method, then params).
COMPLETE_NOTICE = re.compile(
    rb'"method":\s*"notifications/elicitation/complete".*?"elicitationId":\s*"([A-Za-z0-9_-]+)"'
)
# Loggers set to DEBUG while an attack runs (the root handler sees every other logger too).
LOGGERS = (
    "",
    "httpx",
    "httpcore",
    "authlib",
    "redis",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "mcp",
    "starlette",
    "service",
    "connect_routes",
    "token_store",
    "mock_providers",
)


def unique(name: str) -> str:
    """A user name no other test uses (dev AS names: letters, digits, `-`)."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


# ---- the wire --------------------------------------------------------------------------------


@dataclass(eq=False)
class Exchange:
    """One HTTP request to one of the two apps, and what it answered (streams included)."""

    app: str
    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytearray = field(default_factory=bytearray)
    status: int | None = None
    response_headers: list[tuple[str, str]] = field(default_factory=list)
    response_body: bytearray = field(default_factory=bytearray)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    def response_header(self, name: str) -> str | None:
        return next((v for k, v in self.response_headers if k == name), None)

    def form(self) -> dict[str, list[str]]:
        if "x-www-form-urlencoded" not in (self.header("content-type") or ""):
            return {}
        return parse_qs(bytes(self.body).decode("latin-1"))


@dataclass(frozen=True, eq=False)
class Event:
    exchange: Exchange
    kind: Literal["request", "start", "body"]
    data: bytes = b""


class Wire:
    """Every event of every exchange, in order; appended from the servers' thread."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.exchanges: list[Exchange] = []

    def mark(self) -> int:
        return len(self.events)

    def since(self, mark: int) -> list[Event]:
        return self.events[mark:]


class RecordingApp:
    """Pure ASGI wrapper that records the request and every response message."""

    def __init__(self, app: Any, wire: Wire, name: str) -> None:
        self.app = app
        self.wire = wire
        self.name = name
        # path -> ASGI app answering instead of the real one (a provider that misbehaves in a way
        # its knobs do not offer, for example a redirect of the token request).
        self.replace: dict[str, Any] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        exchange = Exchange(
            app=self.name,
            method=scope["method"],
            path=scope["path"],
            query=scope.get("query_string", b"").decode("latin-1"),
            headers=[(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope["headers"]],
        )
        self.wire.exchanges.append(exchange)
        self.wire.events.append(Event(exchange, "request"))

        async def recording_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                exchange.body.extend(message.get("body", b""))
            return message

        async def recording_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                exchange.status = message["status"]
                exchange.response_headers = [
                    (k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in message.get("headers", [])
                ]
                self.wire.events.append(Event(exchange, "start"))
            elif message["type"] == "http.response.body":
                chunk = bytes(message.get("body", b""))
                exchange.response_body.extend(chunk)
                self.wire.events.append(Event(exchange, "body", chunk))
            await send(message)

        app = self.replace.get(scope["path"], self.app)
        await app(scope, recording_receive, recording_send)


@dataclass
class Servers(DemoServers):
    """DemoServers whose two apps are wrapped in `RecordingApp`s sharing one `Wire`."""

    wire: Wire = field(init=False, default_factory=Wire)
    recording: dict[str, RecordingApp] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.wrap = self._record

    def _record(self, name: str, app: Any) -> RecordingApp:
        self.recording[name] = RecordingApp(app, self.wire, name)
        return self.recording[name]

    def start(self) -> Servers:
        super().start()
        return self

    def exchanges(self, app: str, since: int = 0) -> list[Exchange]:
        seen: list[Exchange] = []
        for event in self.wire.since(since):
            if event.kind == "request" and event.exchange.app == app:
                seen.append(event.exchange)
        return seen


class Listener:
    """An attacker's HTTP server on loopback (a jku/x5u target, a redirect target): answers
    `body` as JSON to every request and records each one (method, path, headers, body)."""

    def __init__(self, body: Any = None) -> None:
        self.hits: list[tuple[str, str, dict[str, str], bytes]] = []
        self.body: Any = body if body is not None else {}
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else b""
                listener.hits.append((self.command, self.path, dict(self.headers), data))
                payload = json.dumps(listener.body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/") -> str:
        return f"http://{HOST}:{self.port}{path}"

    def __enter__(self) -> Listener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


_RUNNING: dict[str, Servers] = {}


def running(
    tmp_path_factory: Any, name: str, *, clock: Callable[[], float] = time.time, **overrides: object
) -> Iterator[Servers]:
    """Start a recorded demo for a fixture (settings `overrides` as for DemoServers, the MCP
    server on `clock`); stop it after."""
    servers = Servers(tmp_path_factory.mktemp(name) / "data", overrides=dict(overrides), clock=clock).start()
    _RUNNING[servers.public_url] = servers
    try:
        yield servers
    finally:
        servers.stop()
        _RUNNING.pop(servers.public_url, None)


def servers_of(url: str) -> Servers:
    """The running demo a URL belongs to (so a step given only a link knows whose secret to use)."""
    parts = urlsplit(url)
    return _RUNNING[f"{parts.scheme}://{parts.netloc}"]


# ---- the store -------------------------------------------------------------------------------


def _sqlite(servers: Servers) -> sqlite3.Connection:
    return sqlite3.connect(servers.store_file, timeout=10)


def _redis(servers: Servers) -> Any:
    import redis

    return redis.Redis.from_url(servers.demo.settings.effective_store_url, socket_timeout=5)


def _redis_keys(client: Any, prefix: str) -> list[bytes]:
    from tests.needs import glob_escape

    return list(client.scan_iter(match=glob_escape(prefix) + "*", count=500))


def _postgres(servers: Servers, sql: str, *args: object) -> list[tuple[Any, ...]]:
    """The rows of one query on the demo's PostgreSQL store, from this (synchronous) harness: on a
    loop of its own in a worker thread."""
    import asyncpg

    async def fetch() -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(servers.demo.settings.effective_store_url)
        try:
            return [tuple(row) for row in await conn.fetch(sql, *args)]
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        return worker.submit(asyncio.run, fetch()).result()  # type: ignore[arg-type]


def connection_records(servers: Servers) -> set[tuple[str, ...]]:
    """Every stored connection: who, which provider and account, and a digest of the sealed blob."""
    settings = servers.demo.settings
    if settings.uses_postgres:
        rows = _postgres(servers, "SELECT iss, sub, provider, account, blob FROM connections")
        return {(iss, sub, p, a, hashlib.sha256(blob).hexdigest()) for iss, sub, p, a, blob in rows}
    if settings.uses_redis:
        client = _redis(servers)
        try:
            records: set[tuple[str, ...]] = set()
            for key in _redis_keys(client, settings.redis_prefix + "conn:"):
                for account, value in client.hgetall(key).items():
                    digest = hashlib.sha256(value).hexdigest()
                    records.add((key.decode(), account.decode(), digest))
            return records
        finally:
            client.close()
    with contextlib.closing(_sqlite(servers)) as db:
        rows = db.execute("SELECT iss, sub, provider, account, blob FROM connections").fetchall()
    return {(iss, sub, p, a, hashlib.sha256(blob).hexdigest()) for iss, sub, p, a, blob in rows}


def connected_subs(servers: Servers) -> list[str]:
    with contextlib.closing(_sqlite(servers)) as db:
        return [row[0] for row in db.execute("SELECT sub FROM connections ORDER BY sub")]


def elicitation_status(servers: Servers, elicitation_id: str) -> str | None:
    settings = servers.demo.settings
    if settings.uses_postgres:
        found = _postgres(servers, "SELECT status FROM elicitations WHERE id = $1", elicitation_id)
        return str(found[0][0]) if found else None
    if settings.uses_redis:
        client = _redis(servers)
        try:
            raw = client.hget(f"{settings.redis_prefix}elic:{elicitation_id}", "status")
            return raw.decode() if raw is not None else None
        finally:
            client.close()
    with contextlib.closing(_sqlite(servers)) as db:
        row = db.execute("SELECT status FROM elicitations WHERE id = ?", (elicitation_id,)).fetchone()
    return None if row is None else str(row[0])


def elicitations_of(servers: Servers, sub: str) -> list[str]:
    """Statuses of `sub`'s elicitations (SQLite servers)."""
    with contextlib.closing(_sqlite(servers)) as db:
        return [row[0] for row in db.execute("SELECT status FROM elicitations WHERE sub = ?", (sub,))]


def nonce_count(servers: Servers) -> int:
    """Single-use nonces the store holds, live or expired but not yet purged (SQLite servers)."""
    with contextlib.closing(_sqlite(servers)) as db:
        return int(db.execute("SELECT count(*) FROM nonces").fetchone()[0])


def raw_store(servers: Servers) -> list[tuple[str, bytes]]:
    """The store as an operator's backup would see it: the SQLite file and its WAL, every Redis key
    under the prefix with its DUMP and its logical value, or every PostgreSQL row as `pg_dump`
    writes it (text) with each `bytea` also as its raw bytes."""
    settings = servers.demo.settings
    if settings.uses_postgres:
        tables = _postgres(servers, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        parts = []
        for (table,) in tables:
            for (row,) in _postgres(servers, f'SELECT row_to_json(t)::text FROM "{table}" t'):  # noqa: S608
                parts.append((f"row of {table}", row.encode()))
        for table in ("connections", "oauth_states"):
            blobs = _postgres(servers, f"SELECT blob FROM {table}")  # noqa: S608 - constant
            parts += [(f"blob of {table}", blob) for (blob,) in blobs]
        return parts
    if not settings.uses_redis:
        parts = []
        for suffix in ("", "-wal", "-shm"):
            path = servers.store_file.with_name(servers.store_file.name + suffix)
            if path.exists():
                parts.append((path.name, path.read_bytes()))
        return parts
    client = _redis(servers)
    try:
        parts = []
        for key in _redis_keys(client, settings.redis_prefix):
            parts.append((f"key {key!r}", key))
            dumped = client.dump(key)
            if dumped is not None:
                parts.append((f"DUMP {key!r}", dumped))
            kind = client.type(key).decode()
            if kind == "string":
                value = client.get(key) or b""
            elif kind == "hash":
                value = b"\n".join(k + b"=" + v for k, v in client.hgetall(key).items())
            elif kind == "set":
                value = b"\n".join(client.smembers(key))
            elif kind == "zset":
                value = b"\n".join(client.zrange(key, 0, -1))
            else:
                value = b""
            parts.append((f"value {key!r}", value))
        return parts
    finally:
        client.close()


# ---- canaries --------------------------------------------------------------------------------

# Where each kind may legitimately appear: states ride in redirect Locations by design, and
# elicitation ids and requestState values are handed to the client by design (logs only).
LOG_ONLY_KINDS = ("elicitation id", "requestState")
STORE_SKIPS = ("elicitation id", "requestState")


def encodings(secret: str) -> set[str]:
    """`secret` as it may appear: plain, URL-encoded, and base64 (standard and URL-safe alphabets,
    at each of the three byte alignments it can have inside a larger encoded blob)."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret)}
    raw = secret.encode()
    for offset in range(3):
        first = -(-8 * offset // 6)  # the first character made only of the secret's bits
        last = 8 * (offset + len(raw)) // 6
        padded = b"\0" * offset + raw
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(padded).decode()[first:last])
    return {f for f in forms if len(f) >= MIN_CANARY}


@dataclass
class Canaries:
    by_kind: dict[str, set[str]] = field(default_factory=dict)

    def add(self, kind: str, *values: object) -> None:
        for value in values:
            if isinstance(value, str) and len(value) >= MIN_CANARY and value != "null":
                self.by_kind.setdefault(kind, set()).add(value)

    def forms(self, skip: Sequence[str] = ()) -> list[tuple[str, str, str]]:
        """(kind, secret, encoded form) for every secret of every kind not in `skip`."""
        return [
            (kind, secret, form)
            for kind, secrets in self.by_kind.items()
            if kind not in skip
            for secret in secrets
            for form in encodings(secret)
        ]

    def count(self) -> int:
        return sum(len(v) for v in self.by_kind.values())


def find_leaks(text: str, forms: Iterable[tuple[str, str, str]], where: str) -> list[str]:
    leaks = []
    for kind, secret, form in forms:
        at = text.find(form)
        if at >= 0:
            context = text[max(0, at - 60) : at + len(form) + 20].replace(form, f"<{kind} {secret[:6]}…>")
            leaks.append(f"{where}: {kind} {secret[:6]}… found: {context!r}")
    return leaks


_REQUEST_STATE = re.compile(rb'"requestState"\s*:\s*"([^"]+)"')
_TOKEN_FIELDS = ("access_token", "refresh_token", "id_token")


def gather_canaries(servers: Servers, browsers: Sequence[Browser], extra: Iterable[str]) -> Canaries:
    c = Canaries()
    hub = servers.mockhub
    c.add("provider token", *hub.issued_access_tokens, *hub.issued_refresh_tokens)
    c.add("code", *hub.codes)
    c.add("code", *servers.apps["providers"].state.dev_as.codes)
    secrets_file = json.loads((servers.data_dir / "demo-secrets.json").read_text())
    for value in secrets_file.values():
        c.add("secret", value, *value.split(":")[1:])
    dev_as = json.loads((servers.data_dir / "dev-as.json").read_text())
    c.add("secret", dev_as["session_secret"])
    c.add("secret", *(dev_as["signing_key"][k] for k in ("d", "p", "q", "dp", "dq", "qi")))
    c.add("extra", *extra)
    for browser in browsers:
        for url in browser.visited:
            query = parse_qs(urlsplit(url).query)
            c.add("code", *query.get("code", []))
            c.add("state", *query.get("state", []))
        c.add("cookie", *(cookie.value for cookie in browser.http.cookies.jar if cookie.value))
    for exchange in list(servers.wire.exchanges):
        query = parse_qs(exchange.query)
        form = exchange.form()
        if exchange.app == "providers":
            c.add("state", *query.get("state", []), *form.get("state", []))
            c.add("code", *form.get("code", []))
            c.add("verifier", *form.get("code_verifier", []))
            c.add("secret", *form.get("client_secret", []))
            c.add("provider token", *form.get("refresh_token", []))
            authorization = exchange.header("authorization") or ""
            if authorization.lower().startswith("basic "):
                with contextlib.suppress(ValueError):
                    decoded = base64.b64decode(authorization[6:]).decode()
                    c.add("secret", decoded.partition(":")[2])
            location = exchange.response_header("location") or ""
            redirect = parse_qs(urlsplit(location).query)
            c.add("code", *redirect.get("code", []))
            c.add("state", *redirect.get("state", []))
            if exchange.path.endswith("/token") and exchange.response_body[:1] == b"{":
                with contextlib.suppress(ValueError):
                    answer = json.loads(bytes(exchange.response_body))
                    c.add("provider token", *(answer.get(k) for k in _TOKEN_FIELDS))
        else:
            authorization = exchange.header("authorization") or ""
            c.add("bearer", authorization.partition(" ")[2])
            # Codes, states and ids the attacker sends here are not harvested: they may be junk the
            # server rightly logs as such; the real ones come from the provider side and the store.
            c.add("cookie", *_cookie_values(exchange.header("cookie") or ""))
            for name, value in exchange.response_headers:
                if name == "set-cookie":
                    c.add("cookie", value.split(";", 1)[0].partition("=")[2])
            for match in _REQUEST_STATE.finditer(bytes(exchange.response_body)):
                c.add("requestState", match.group(1).decode("latin-1"))
    if servers.demo.settings.uses_postgres:
        c.add("elicitation id", *(row[0] for row in _postgres(servers, "SELECT id FROM elicitations")))
    elif not servers.demo.settings.uses_redis:
        with contextlib.closing(_sqlite(servers)) as db:
            c.add("elicitation id", *(row[0] for row in db.execute("SELECT id FROM elicitations")))
    return c


def _cookie_values(header: str) -> list[str]:
    return [part.strip().partition("=")[2] for part in header.split(";") if "=" in part]


# ---- logs ------------------------------------------------------------------------------------


class ListHandler(logging.Handler):
    """Every record at DEBUG, formatted as a production handler would, through RedactingFilter."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[int, str, str]] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.addFilter(RedactingFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, self.format(record)))

    @property
    def lines(self) -> list[str]:
        return [line for _, _, line in self.records]


@contextlib.contextmanager
def captured_logs() -> Iterator[ListHandler]:
    handler = ListHandler()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    levels = [logger.level for logger in loggers]
    root = logging.getLogger()
    root.addHandler(handler)
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# ---- the attack ------------------------------------------------------------------------------

Expected = int | range


@dataclass
class Attack:
    """What a test asserts about its attack; `attack()` adds the checks every attack shares."""

    servers: Servers
    expectations: list[str] = field(default_factory=list)
    observed: list[Any] = field(default_factory=list)
    extra_secrets: set[str] = field(default_factory=set)

    def status(self, response: httpx.Response, *expected: Expected) -> httpx.Response:
        """(1) the HTTP status is one of `expected` (ints or ranges)."""
        code = response.status_code
        assert any(code == e if isinstance(e, int) else code in e for e in expected), (
            f"{response.request.method} {response.request.url.path}: HTTP {code}, expected {expected}\n"
            f"{response.text[:400]}"
        )
        self.expectations.append(f"HTTP {code}")
        self.observe(response.text)
        return response

    def rpc_error(self, error: BaseException, code: int, message: str | None = None) -> MCPError:
        """(1) the JSON-RPC error code (and optionally a piece of its message)."""
        assert isinstance(error, MCPError), f"expected JSON-RPC error {code}, got {error!r}"
        assert error.error.code == code, f"JSON-RPC error {error.error.code} {error.error.message!r}"
        if message is not None:
            assert message in error.error.message, error.error.message
        self.expectations.append(f"JSON-RPC {code}")
        self.observe(error.error.model_dump())
        return error

    def check(self, condition: bool, what: str) -> None:
        """(1) any other stated outcome (for example: the tool answered for the caller only)."""
        assert condition, what
        self.expectations.append(what)

    def observe(self, *objects: Any) -> None:
        """Add something the attacker or the client received to the secret scan."""
        self.observed.extend(objects)

    def secret(self, *values: str) -> None:
        """Add canaries only the test knows (for example a token from a dev AS login)."""
        self.extra_secrets.update(values)


@contextlib.asynccontextmanager
async def attack(
    servers: Servers,
    *,
    browsers: Sequence[Browser] = (),
    recorders: Sequence[Recorder] = (),
    new_connections: int = 0,
    removed_connections: int = 0,
    token_requests: int = 0,
    exchanges_ok: int = 0,
    completions: int = 0,
    allow_errors: bool = False,
    settle: float = 0.05,
) -> AsyncIterator[Attack]:
    before_records = connection_records(servers)
    before_tokens = len(servers.mockhub.token_requests)
    before_completed = [len(r.completed_ids()) for r in recorders]
    mark = servers.wire.mark()
    a = Attack(servers)
    with captured_logs() as logs:
        yield a
        await quiet_for(settle, "a stray notification or log line")
    assert a.expectations, "an attack test must state its expected status, error or outcome"

    # (2) no token written
    after_records = connection_records(servers)
    added, removed = after_records - before_records, before_records - after_records
    assert len(added) == new_connections, f"connections written: {sorted(added)}"
    assert len(removed) == removed_connections, f"connections removed: {sorted(removed)}"

    # (3) no token-endpoint call
    new_requests = servers.mockhub.token_requests[before_tokens:]
    assert len(new_requests) == token_requests, f"token endpoint reached: {new_requests}"
    assert sum(1 for r in new_requests if r.ok) == exchanges_ok, f"codes redeemed: {new_requests}"

    # (4) no completion notification but the failure notices of failed flows
    events = servers.wire.since(mark)
    notified = [
        elicitation_id
        for e in events
        if e.exchange.app == "mcp" and e.kind == "body"
        for elicitation_id in COMPLETE_NOTICE.findall(bytes(e.data))
    ]
    successes = [i for i in notified if elicitation_status(servers, i.decode()) != "failed"]
    assert len(successes) == completions, (
        f"{len(successes)} completion notification(s) for flows that did not fail, expected {completions}"
    )
    failure_notices = len(notified) - len(successes)
    for recorder, count in zip(recorders, before_completed, strict=True):
        received = len(recorder.completed_ids()) - count
        assert received <= completions + failure_notices, recorder.completed_ids()

    # (1) no internal error
    errors = [e.exchange for e in events if e.kind == "start" and e.exchange.app == "mcp"]
    crashed = [f"{x.method} {x.path} -> {x.status}" for x in errors if x.status == 500]
    assert not crashed, f"internal server errors: {crashed}"
    if not allow_errors:
        loud = [line for level, _, line in logs.records if level >= logging.ERROR]
        assert not loud, "ERROR logs:\n" + "\n".join(loud)[:3000]

    # (6) the MCP bearer never reaches a provider
    canaries = gather_canaries(servers, browsers, a.extra_secrets)
    provider_tokens = canaries.by_kind.get("provider token", set())
    bearers = canaries.by_kind.get("bearer", set()) - provider_tokens  # an attacker may present those
    for exchange in servers.exchanges("providers"):
        sent_out = " ".join([exchange.query, bytes(exchange.body).decode("latin-1")])
        sent_out += " " + " ".join(v for k, v in exchange.headers if k != "cookie")
        passed = [b[:12] for b in bearers if b in sent_out]
        assert not passed, f"MCP bearer sent to the provider: {exchange.method} {exchange.path} {passed}"

    # (5) no secret anywhere
    leaks = scan_everything(servers, canaries, events, logs, recorders, a.observed)
    assert not leaks, "secrets leaked:\n" + "\n".join(leaks[:20])


def scan_everything(
    servers: Servers,
    canaries: Canaries,
    events: Sequence[Event],
    logs: ListHandler,
    recorders: Sequence[Recorder],
    observed: Sequence[Any],
) -> list[str]:
    assert canaries.count() > 0
    everywhere = canaries.forms(skip=LOG_ONLY_KINDS)
    not_states = [f for f in everywhere if f[0] != "state"]
    leaks: list[str] = []
    # What the MCP server sent in the window, per exchange: headers (the Set-Cookie that sets the
    # session is there by design; a Location may carry a state by design) and the body chunks.
    headers: dict[Exchange, str] = {}
    locations: dict[Exchange, str] = {}
    bodies: dict[Exchange, list[bytes]] = {}
    for event in events:
        exchange = event.exchange
        if exchange.app != "mcp":
            continue
        if event.kind == "start":
            kept = [f"{k}: {v}" for k, v in exchange.response_headers if k not in ("set-cookie", "location")]
            headers[exchange] = f"{exchange.status}\n" + "\n".join(kept)
            locations[exchange] = exchange.response_header("location") or ""
        elif event.kind == "body" and event.data:
            bodies.setdefault(exchange, []).append(event.data)
    for exchange, text in headers.items():
        where = f"{exchange.method} {exchange.path} -> {exchange.status}"
        leaks += find_leaks(text, everywhere, f"{where} header")
        leaks += find_leaks(locations[exchange], not_states, f"{where} location")
    for exchange, chunks in bodies.items():
        where = f"{exchange.method} {exchange.path} -> {exchange.status}"
        leaks += find_leaks(b"".join(chunks).decode("latin-1"), everywhere, f"{where} body")
    for recorder in recorders:
        text = json.dumps([m.model_dump() if hasattr(m, "model_dump") else m for m in recorder.notifications])
        leaks += find_leaks(text, everywhere, "notification")
    for item in observed:
        text = item if isinstance(item, str) else json.dumps(item, default=str)
        leaks += find_leaks(text, everywhere, "client-visible result")
    log_text = "\n".join(logs.lines)
    leaks += find_leaks(log_text, canaries.forms(), "log")
    store_forms = canaries.forms(skip=STORE_SKIPS)
    for name, blob in raw_store(servers):
        leaks += find_leaks(blob.decode("latin-1"), store_forms, f"store {name}")
    return leaks
