"""The deploy kit against the real binaries (deploy/, docs/deploy.md): redis-server started as the kit
runs it, and the router: `nginx -t` on deploy/nginx/nginx.conf as rendered for Kubernetes and
compose, and a live check of the session routing, Host pass-through, unbuffered SSE, the body cap,
request ids, per-client limits and DNS lookups against stub replicas. These skip without the
binaries, and fail instead when CI is set (tests/needs.py). What needs no binary:
tests/project/test_deploy_kit.py."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from mock_providers.testing.dns import DnsServer
from mock_providers.testing.router import (
    any_replica_name,
    render,
    replica_name,
    router_conf,
)
from mock_providers.testing.servers import free_port
from service.http.request_id import REQUEST_ID_SHAPE
from service.http.request_limits import MAX_REQUEST_HEAD_BYTES
from tests.needs import need_binary
from tests.support.deploy_kit import (
    FSYNC_POLICY,
    NGINX_CONF,
    REPLICAS,
    compose_file,
    k8s_objects,
    redis_maxmemory,
)
from tests.support.settle import eventually, succeeds

SPREAD = 30  # requests that show both replicas get some (the router picks one at random)


def test_redis_started_as_the_kit_runs_it_answers_oom_when_full(yaml: ModuleType, tmp_path: Path) -> None:
    redis_server = need_binary("redis-server")
    _, policy = redis_maxmemory(
        k8s_objects(yaml)[("StatefulSet", "redis")]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    )
    port = free_port()
    process = subprocess.Popen(  # the kit's policy, a limit small enough to reach here
        [
            *(redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)),
            *("--maxmemory", "2mb", "--maxmemory-policy", policy),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        import redis as redis_client

        client = redis_client.Redis(host="127.0.0.1", port=port, socket_timeout=5)
        eventually(lambda: succeeds(client.ping, redis_client.ConnectionError), "redis-server to start")
        with pytest.raises(redis_client.exceptions.OutOfMemoryError):  # -OOM
            for i in range(1000):
                client.set(f"k{i}", b"x" * 16384)
        assert client.get("k0") == b"x" * 16384  # nothing was evicted
        client.close()
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_redis_started_as_documented_writes_private_files(tmp_path: Path) -> None:
    """The command compose and k8s run (umask 077, AOF, fsync always) against a real redis-server:
    every file it writes is readable by its owner only."""
    redis_server = need_binary("redis-server")
    port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    command = (
        f"umask 077 && exec {redis_server} --port {port} --bind 127.0.0.1 --save '' "
        f"--appendonly yes --appendfsync {FSYNC_POLICY} --dir {data}"
    )
    process = subprocess.Popen(["sh", "-c", command], stdout=subprocess.DEVNULL)
    try:

        def stored() -> None:
            assert process.poll() is None, "redis-server exited"
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"SET k v\r\n")
                assert conn.recv(16) == b"+OK\r\n"

        eventually(lambda: succeeds(stored, OSError), "redis-server to store a key")
    finally:
        process.terminate()
        process.wait(timeout=10)
    written = [p for p in data.rglob("*") if p.is_file()]
    assert written, "the AOF was written"
    for path in written:
        assert path.stat().st_mode & 0o077 == 0, f"{path.name} is {oct(path.stat().st_mode)}"


REPLICA_ADDRESSES = {"mcp-1": "127.0.0.2", "mcp-2": "127.0.0.3"}


def _nginx_test(nginx: str, prefix: Path) -> None:
    result = subprocess.run(
        [nginx, "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_nginx_accepts_the_conf_as_rendered_for_kubernetes_and_compose(
    yaml: ModuleType, tmp_path: Path
) -> None:
    nginx = need_binary("nginx")
    need_binary("envsubst")
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "nginx.conf").write_text(router_conf("127.0.0.1:8080", "127.0.0.1:53", 8000))
    _nginx_test(nginx, tmp_path / "k8s")
    compose = {
        **compose_file(yaml)["services"]["nginx"]["environment"],
        "NGINX_LOCAL_RESOLVERS": "127.0.0.11",
    }
    (tmp_path / "compose").mkdir()
    (tmp_path / "compose" / "nginx.conf").write_text(render(compose))
    _nginx_test(nginx, tmp_path / "compose")


class StubReplica:
    """An HTTP server standing in for one replica at `address`:`port`: says who and where it is
    and what Host it got; streams SSE on /mcp/stream; drops the connection, unanswered, on
    /drop and the OAuth callbacks."""

    def __init__(self, name: str, address: str = "127.0.0.1", port: int = 0) -> None:
        self.name = name
        self.address = address
        self.seen: list[dict[str, Any]] = []
        self.connections: list[str] = []  # one entry per connection accepted
        self.release = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                stub.connections.append(stub.name)
                super().setup()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(b"")

            def do_POST(self) -> None:
                self._answer(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

            def _answer(self, body: bytes) -> None:
                stub.seen.append(
                    {
                        "path": self.path,
                        "host": self.headers.get("Host"),
                        "session": self.headers.get("Mcp-Session-Id"),
                        "forwarded_for": self.headers.get("X-Forwarded-For"),
                        "request_id": self.headers.get("X-Request-ID"),
                        "length": str(len(body)),
                        "fields": [name.lower() for name in self.headers],
                    }
                )
                if self.path.startswith(("/drop", "/callback/", "/login/callback")):
                    self.close_connection = True
                    return
                if self.path == "/mcp/stream":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(b"data: first\n\n")
                    self.wfile.flush()
                    stub.release.wait(30)  # the test reads "first" while the stream is still open
                    self.wfile.write(b"data: second\n\n")
                    self.close_connection = True
                    return
                answer = json.dumps(
                    {"replica": stub.name, "address": stub.address, "host": self.headers.get("Host")}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Router:
    """The router's nginx, as rendered for Kubernetes, in front of stub replicas that a DNS
    server of the test's own publishes under the headless Service's names."""

    base: str
    dns: DnsServer
    replica_port: int
    log: Path
    stubs: dict[str, StubReplica] = field(default_factory=dict)

    def publish(self) -> None:
        self.dns.set(any_replica_name(), [stub.address for stub in self.stubs.values()])
        for name, stub in self.stubs.items():
            self.dns.set(replica_name(name), [stub.address])

    def move(self, name: str, address: str) -> None:
        """A rollout: replica `name` recreated at `address`, and its new address published."""
        self.stubs[name].stop()
        self.stubs[name] = StubReplica(name, address, self.replica_port)
        self.publish()

    def log_text(self, complete: Callable[[str], bool]) -> str:
        """The log once `complete(text)` holds: nginx writes a request's line after answering it."""
        eventually(lambda: complete(self.log.read_text()), "nginx's log lines")
        return self.log.read_text()


def _start_router(tmp_path: Path, publish: bool = True) -> Iterator[Router]:
    nginx = need_binary("nginx")
    need_binary("envsubst")
    port = free_port()
    router = Router(f"http://127.0.0.1:{port}", DnsServer(), free_port(), tmp_path / "nginx.log")
    router.stubs = {name: StubReplica(name, a, router.replica_port) for name, a in REPLICA_ADDRESSES.items()}
    if publish:
        router.publish()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    (prefix / "nginx.conf").write_text(
        router_conf(f"127.0.0.1:{port}", router.dns.address, router.replica_port)
    )
    log = router.log.open("w")
    process = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr", "-g", "daemon off;"],
        stdout=log,
        stderr=log,
    )
    try:

        def listening() -> None:
            assert process.poll() is None, router.log.read_text()
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()

        eventually(lambda: succeeds(listening, OSError), "nginx to start")
        yield router
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()
        for stub in router.stubs.values():
            stub.stop()
        router.dns.close()


@pytest.fixture
def router(tmp_path: Path) -> Iterator[Router]:
    yield from _start_router(tmp_path)


@pytest.fixture
def proxied(router: Router) -> tuple[str, dict[str, StubReplica]]:
    return router.base, router.stubs


def test_nginx_routes_sessions_passes_host_streams_and_caps_bodies(
    proxied: tuple[str, dict[str, StubReplica]],
) -> None:
    base, stubs = proxied
    public_host = "mcp.example.test:8080"
    with httpx.Client(base_url=base, timeout=5, headers={"Host": public_host}) as client:
        # No session id (initialize, 2026-07-28, browsers): both replicas get requests. The router
        # takes the replicas in the random order its resolver returns them: 30 requests all on one
        # replica would be a 1 in 500 million event.
        answered = {client.post("/mcp", content=b"{}").json()["replica"] for _ in range(SPREAD)}
        assert answered == set(REPLICAS)
        assert {client.get("/connections").json()["replica"] for _ in range(SPREAD)} == set(REPLICAS)
        # A session id goes to the replica named by its prefix, every time.
        for replica in REPLICAS:
            for _ in range(4):
                answer = client.post("/mcp", content=b"{}", headers={"Mcp-Session-Id": f"{replica}.abc123"})
                assert answer.json() == {
                    "replica": replica,
                    "address": REPLICA_ADDRESSES[replica],
                    "host": public_host,
                }
        # A replica that does not exist (scaled away): its name does not resolve, the session is
        # gone. Any other prefix reaches one of ours (which answers 404 for the session).
        stale = client.post("/mcp", headers={"Mcp-Session-Id": "mcp-10.x"})
        assert stale.status_code == 404 and stale.json()["error"]["message"] == "Session not found"
        assert client.post("/mcp", headers={"Mcp-Session-Id": "evil.example.com.x"}).status_code == 200
        # Bodies over 1 MiB never reach a replica.
        before = sum(len(s.seen) for s in stubs.values())
        assert client.post("/mcp", content=b"x" * (2 * 1024 * 1024)).status_code == 413
        assert sum(len(s.seen) for s in stubs.values()) == before
        assert client.post("/mcp", content=b"x" * 1024).status_code == 200
    assert {r["forwarded_for"] for s in stubs.values() for r in s.seen} == {"127.0.0.1"}

    # SSE: the first event arrives while the replica still holds the stream open (no buffering).
    stream_headers = {"Host": public_host, "Mcp-Session-Id": "mcp-2.abc", "Accept-Encoding": "gzip"}
    with (
        httpx.Client(base_url=base, timeout=httpx.Timeout(5, read=3)) as client,
        client.stream("GET", "/mcp/stream", headers=stream_headers) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "content-encoding" not in response.headers
        lines = response.iter_lines()
        assert next(lines) == "data: first"
        assert not stubs["mcp-2"].release.is_set()
        stubs["mcp-2"].release.set()
        assert "data: second" in list(lines)
    assert stubs["mcp-2"].seen[-1]["path"] == "/mcp/stream"


def _nginx_version(nginx: str) -> tuple[int, ...]:
    banner = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=10, check=True).stderr
    match = re.search(r"nginx/(\d+)\.(\d+)", banner)
    assert match, banner
    return tuple(int(part) for part in match.groups())


REPEATABLE_BY_MISTAKE = {  # field: two values a client (or an attacker) might send
    "MCP-Protocol-Version": ("2025-11-25", "2026-07-28"),
    "Mcp-Session-Id": ("mcp-1.aaa", "mcp-2.bbb"),
    "Mcp-Method": ("tools/call", "initialize"),
    "Last-Event-ID": ("1", "2"),
}


def test_nginx_never_passes_a_repeated_single_valued_field(
    proxied: tuple[str, dict[str, StubReplica]],
) -> None:
    """RFC 9110 §5.3: a repeated MCP header field is refused with 400 (nginx 1.23 and later, which
    joins the lines in $http_*), and no replica ever receives two lines of one (nginx 1.22 keeps
    the first). A repeated Authorization is refused by nginx itself."""
    base, stubs = proxied
    refuses = _nginx_version(need_binary("nginx")) >= (1, 23)
    with httpx.Client(base_url=base, timeout=5) as client:
        twice = client.post(
            "/mcp", content=b"{}", headers=[("Authorization", "Bearer a"), ("Authorization", "Bearer b")]
        )
        assert twice.status_code == 400
        for field, values in REPEATABLE_BY_MISTAKE.items():
            for pair in (values, values[::-1]):
                before = sum(len(s.seen) for s in stubs.values())
                answer = client.post("/mcp", content=b"{}", headers=[(field, v) for v in pair])
                if refuses:
                    assert answer.status_code == 400, field
                    assert answer.json()["error"]["code"] == -32600
                    assert sum(len(s.seen) for s in stubs.values()) == before
                else:
                    assert answer.status_code == 200, field
        # Control: one line of each passes.
        single = [(field, values[0]) for field, values in REPEATABLE_BY_MISTAKE.items()]
        assert client.post("/mcp", content=b"{}", headers=single).status_code == 200
    for stub in stubs.values():
        for request in stub.seen:
            fields = request["fields"]
            assert isinstance(fields, list)
            repeated = {f for f in fields if fields.count(f) > 1}
            assert not repeated & ({f.lower() for f in REPEATABLE_BY_MISTAKE} | {"authorization"}), request


def test_nginx_answers_404_for_a_session_whose_replica_is_gone(
    proxied: tuple[str, dict[str, StubReplica]], tmp_path: Path
) -> None:
    """2025-11-25 basic/transports "Session Management": a request for a terminated session gets
    404, and the client starts a new one. A killed replica's sessions are terminated."""
    base, stubs = proxied
    stubs["mcp-1"].stop()
    with httpx.Client(base_url=base, timeout=5) as client:
        gone = client.post("/mcp", content=b"{}", headers={"Mcp-Session-Id": "mcp-1.abc123"})
        assert gone.status_code == 404
        assert gone.headers["content-type"].startswith("application/json")
        assert gone.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": "Session not found"},
        }
        # Without a session id (initialize, 2026-07-28, browsers) the live replica answers,
        # every time: the stopped one is skipped, not reported.
        for _ in range(6):
            assert client.post("/mcp", content=b"{}").json()["replica"] == "mcp-2"
            assert client.get("/connections").json()["replica"] == "mcp-2"
        # The live replica's sessions are unaffected.
        kept = client.post("/mcp", content=b"{}", headers={"Mcp-Session-Id": "mcp-2.abc123"})
        assert kept.json()["replica"] == "mcp-2"


def test_nginx_passes_one_request_id_and_keeps_metrics_private(
    proxied: tuple[str, dict[str, StubReplica]],
) -> None:
    base, stubs = proxied
    with httpx.Client(base_url=base, timeout=5) as client:
        client.get("/connections", headers={"X-Request-ID": "edge-42"})
        client.get("/connections")
        assert client.get("/metrics").status_code == 404
    seen = [r for s in stubs.values() for r in s.seen]
    assert [r["request_id"] for r in seen if r["request_id"] == "edge-42"] == ["edge-42"]
    [generated] = [r["request_id"] for r in seen if r["request_id"] != "edge-42"]
    assert generated is not None and re.fullmatch(r"[0-9a-f]{32}", generated)
    assert not [r for r in seen if r["path"].startswith("/metrics")]


FORGED_REQUEST_IDS = (
    'x" 200 0 0.001 upstream=forged',  # a fake end of the log line
    "a" * 129,  # too long
    "id with spaces",
    "\u00e9t\u00e9",  # not ASCII
)


def test_nginx_accepts_a_request_id_only_in_the_replicas_shape(router: Router) -> None:
    """The caller's X-Request-ID reaches nginx's log line and the replica only in the shape the
    replicas accept (service/http/request_id.py: REQUEST_ID_SHAPE); anything else is replaced by a
    fresh id, the same in nginx's line and at the replica."""
    conf = NGINX_CONF.read_text()
    [pattern] = re.findall(r'^\s*"~\^(.*)\$"\s+\$http_x_request_id;$', conf, re.MULTILINE)
    assert pattern == REQUEST_ID_SHAPE.pattern
    with httpx.Client(base_url=router.base, timeout=5) as client:
        for forged in FORGED_REQUEST_IDS:
            answer = client.get("/connections", headers={"X-Request-ID": forged.encode()})
            assert answer.status_code == 200
        client.get("/connections", headers={"X-Request-ID": "edge-42.a:b_c"})
    seen = [r["request_id"] for s in router.stubs.values() for r in s.seen]
    assert "edge-42.a:b_c" in seen
    fresh = [i for i in seen if i != "edge-42.a:b_c"]
    assert len(fresh) == len(FORGED_REQUEST_IDS) and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in fresh)
    log = router.log_text(lambda text: len(re.findall(r"request_id=", text)) >= len(seen))
    logged = re.findall(r"request_id=(\S*)$", log, re.MULTILINE)
    assert sorted(logged) == sorted(seen)  # the same id in nginx's line as at the replica
    assert "forged" not in log and "with spaces" not in log


def test_nginx_never_retries_an_oauth_callback_on_another_replica(router: Router) -> None:
    """The callbacks' state is single-use (RFC 6749 §10.12; RFC 9700 §4.7.1): a replica that
    failed after receiving a callback may have taken it, so nginx never sends it to a second
    replica. Other routes are retried (the control)."""
    with httpx.Client(base_url=router.base, timeout=5) as client:
        for path in ("/callback/mockhub?code=c&state=s", "/login/callback?code=c&state=s"):
            before = sum(len(s.seen) for s in router.stubs.values())
            assert client.get(path).status_code == 502
            assert sum(len(s.seen) for s in router.stubs.values()) == before + 1, path
        before = sum(len(s.seen) for s in router.stubs.values())
        assert client.get("/drop").status_code == 502
        assert sum(len(s.seen) for s in router.stubs.values()) == before + 2  # retried once
        # The replicas still serve everything else.
        assert client.get("/connections").status_code == 200


def test_nginx_limits_each_client_and_serves_the_others(router: Router) -> None:
    """Per client address: past 100 connections at once, or bursts past 200 requests (100 a
    second), 429; another client is served meanwhile."""
    other = httpx.HTTPTransport(local_address="127.0.0.5")
    stream = {"Mcp-Session-Id": "mcp-1.abc"}
    limits = httpx.Limits(max_connections=None)
    with (
        httpx.Client(base_url=router.base, timeout=httpx.Timeout(5, read=3), limits=limits) as client,
        contextlib.ExitStack() as streams,
    ):
        opened = [
            streams.enter_context(client.stream("GET", "/mcp/stream", headers=stream)) for _ in range(100)
        ]
        assert {response.status_code for response in opened} == {200}
        assert client.get("/healthz").status_code == 429  # the 101st connection (101 requests: no burst)
        with httpx.Client(base_url=router.base, timeout=5, transport=other) as neighbour:
            assert neighbour.get("/healthz").status_code == 200
        router.stubs["mcp-1"].release.set()
    with httpx.Client(base_url=router.base, timeout=5) as client:
        statuses = [client.get("/healthz").status_code for _ in range(600)]
    assert 429 in statuses
    with httpx.Client(base_url=router.base, timeout=5, transport=other) as client:
        assert client.get("/healthz").status_code == 200


def test_nginx_refuses_request_heads_the_replicas_would(router: Router) -> None:
    """RFC 9110 §5.4 (a server may refuse a head too large to process): nginx's limit is under
    the replicas' own (service/http/request_limits.py: MAX_REQUEST_HEAD_BYTES), so what nginx passes a
    replica accepts."""
    with httpx.Client(base_url=router.base, timeout=5) as client:
        fits = {f"X-Fill-{i}": "f" * 5000 for i in range(2)}
        assert client.get("/connections", headers=fits).status_code == 200
        assert sum(len(k) + len(v) + 4 for k, v in fits.items()) < MAX_REQUEST_HEAD_BYTES
        line = client.get("/connections", headers={"X-Fill": "f" * 7000})
        assert line.status_code == 400
        too_many = {f"X-Fill-{i}": "f" * 5000 for i in range(4)}
        assert client.get("/connections", headers=too_many).status_code == 400
        assert client.get("/connections").status_code == 200
    served = [r for s in router.stubs.values() for r in s.seen if r["path"] == "/connections"]
    assert len(served) == 2


BODY_TIMEOUT = 10  # client_body_timeout in deploy/nginx/nginx.conf


def test_nginx_reads_each_body_whole_before_a_replica_and_times_out_a_stalled_one(router: Router) -> None:
    """Slowloris by the body: a body that stops coming holds a connection of nginx, never one of
    a replica (every route's body is read whole first, `proxy_request_buffering on`), and after
    `client_body_timeout` nginx ends the request (408) and closes. Another client is served
    meanwhile."""
    host, port = router.base.removeprefix("http://").rsplit(":", 1)
    stalled = []
    for path in ("/logout", "/connect/api-key", "/mcp") * 4:
        conn = socket.create_connection((host, int(port)), timeout=BODY_TIMEOUT + 20)
        conn.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100\r\n\r\ncsrf=".encode())
        stalled.append(conn)
    with httpx.Client(base_url=router.base, timeout=5) as client:
        assert client.get("/connections").status_code == 200
    for conn in stalled:
        with conn:
            # nginx closes the connection without writing its 408 (the access log has it).
            assert conn.recv(4096) == b""
    log = router.log_text(lambda text: text.count('" 408 ') >= len(stalled))
    for path in ("/logout", "/connect/api-key", "/mcp"):
        assert log.count(f'"POST {path}" 408 ') == 4, log
    # The neighbour's request is all the replicas ever saw.
    assert sum(len(stub.connections) for stub in router.stubs.values()) == 1
    assert [r["path"] for s in router.stubs.values() for r in s.seen] == ["/connections"]


def test_the_router_finds_replicas_in_dns_at_request_time(tmp_path: Path) -> None:
    """The router starts with no replica ready (none in DNS), serves them once they are
    published, and follows a replica recreated at a new address (a rollout)."""
    started = _start_router(tmp_path, publish=False)
    router = next(started)
    session = {"Mcp-Session-Id": "mcp-1.abc"}
    try:
        with httpx.Client(base_url=router.base, timeout=5) as client:
            gone = client.post("/mcp", content=b"{}", headers=session)
            assert gone.status_code == 404 and gone.json()["error"]["message"] == "Session not found"
            assert client.get("/connections").status_code == 502
            router.publish()
            # the router's cached DNS answers expire after `valid=2s`
            eventually(
                lambda: _address(client, session) == "127.0.0.2", "mcp-1 at its first address", poll=0.2
            )
            router.move("mcp-1", "127.0.0.4")
            eventually(lambda: _address(client, session) == "127.0.0.4", "mcp-1's new address", poll=0.2)
            # The other replica's sessions never noticed.
            assert _address(client, {"Mcp-Session-Id": "mcp-2.abc"}) == "127.0.0.3"
            addresses = {client.get("/connections").json()["address"] for _ in range(SPREAD)}
            assert addresses == {"127.0.0.3", "127.0.0.4"}
    finally:
        started.close()


def _address(client: httpx.Client, headers: dict[str, str]) -> str | None:
    answer = client.post("/mcp", content=b"{}", headers=headers)
    return str(answer.json()["address"]) if answer.status_code == 200 else None


def test_nginx_error_log_quotes_no_codes_states_or_links(router: Router) -> None:
    """Replicas down or not in DNS: the failures show in the access log (502 from the upstream),
    and no log line carries a code, a state or a connect link, on any path."""
    router.stubs["mcp-1"].stop()
    router.stubs["mcp-2"].stop()
    router.dns.remove(replica_name("mcp-2"))  # a replica whose name no longer resolves
    with httpx.Client(base_url=router.base, timeout=5) as client:
        for path in (
            "/callback/mockhub?code=SECRETCODE1&state=SECRETSTATE1&iss=x",
            "/login/callback?code=SECRETCODE2&state=SECRETSTATE2",
            "/connect?elicitationId=SECRETLINK3",
            "/login?next=%2Fconnect%3FelicitationId%3DSECRETLINK4",
            "/connections?elicitationId=SECRETLINK5",
        ):
            assert client.get(path).status_code == 502
        for replica in REPLICAS:
            gone = client.get("/mcp?state=SECRETSTATE6", headers={"Mcp-Session-Id": f"{replica}.x"})
            assert gone.status_code == 404
        # No replica and no session id: a plain 502, not a made-up "session not found".
        assert client.post("/mcp", content=b"{}").status_code == 502
    log = router.log_text(lambda text: text.count("upstream_status=502") >= 7)
    assert log.count("upstream_status=502") >= 7  # the control: every failure is logged
    for secret in ("SECRETCODE", "SECRETSTATE", "SECRETLINK"):
        assert secret not in log
