"""What a malicious token endpoint costs this server: memory, time, stored bytes, repeated sends.

    python -m bench.malicious_provider [--timeout 2] [--huge-mb 150]

A provider on 127.0.0.1 (a separate process, so its memory is not counted) answers four ways:
a token response of `--huge-mb` MB (the growth of this process's peak RSS while the code exchange
fails), a 2 MB `scope` (the store's bytes on disk and the `list_connections` entry's JSON size,
when stored), a token response dripped at one byte a second (how long the code exchange takes
with `http_timeout` = `--timeout`), and a refresh answered slower than the single-flight lock
lives (how many times two callers send the same refresh token). Runs against whatever `service`
is importable, so the same script measures two versions of the code.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx

SCOPE_BYTES = 2 * 1024 * 1024
DRIPPED = b'{"access_token": "at", "token_type": "Bearer"}'


def provider_app(huge_bytes: int, refresh_seconds_per_byte: float) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    refreshes = [0]

    async def huge(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            yield b'{"access_token": "'
            for _ in range(huge_bytes // 65536):
                yield b"x" * 65536
            yield b'"}'

        return StreamingResponse(body(), media_type="application/json")

    async def scope(request: Request) -> Response:
        return JSONResponse(
            {"access_token": "at", "token_type": "Bearer", "scope": "repo " * (SCOPE_BYTES // 5)}
        )

    async def drip(request: Request, seconds: float = 1.0) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for byte in DRIPPED:
                yield bytes([byte])
                await anyio.sleep(seconds)

        return StreamingResponse(body(), media_type="application/json")

    async def refresh(request: Request) -> Response:
        refreshes[0] += 1
        return await drip(request, refresh_seconds_per_byte)

    async def count(request: Request) -> Response:
        return JSONResponse({"refreshes": refreshes[0]})

    routes = [
        Route("/huge", huge, methods=["POST"]),
        Route("/scope", scope, methods=["POST"]),
        Route("/drip", drip, methods=["POST"]),
        Route("/refresh", refresh, methods=["POST"]),
        Route("/count", count),
    ]
    return Starlette(routes=routes)


def serve(port: int, huge_bytes: int, refresh_seconds_per_byte: float) -> None:
    import uvicorn

    app = provider_app(huge_bytes, refresh_seconds_per_byte)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def measure(base: str, http_timeout: float) -> dict[str, Any]:
    from service.providers.catalogue import build_provider
    from service.providers.oauth import exchange_code
    from service.providers.outbound_http import OutboundHttp
    from token_store import Connection, ConnectionKey, KeyRing, UserRef, open_store

    def hub(token_url: str) -> Any:
        spec = {
            "authorize_url": f"{base}/authorize",
            "token_url": token_url,
            "userinfo_url": f"{base}/user",
            "client_id": "c",
            "client_secret": "s",
        }
        return build_provider("hub", spec, {})

    outbound = OutboundHttp(http_timeout)
    figures: dict[str, Any] = {}

    async def exchange(path: str) -> tuple[str, Any]:
        try:
            tokens = await exchange_code(
                hub(f"{base}{path}"),
                token_endpoint=f"{base}{path}",
                redirect_uri="http://127.0.0.1/callback/hub",
                scopes=["repo"],
                code="code",
                code_verifier="v" * 64,
                timeout_seconds=http_timeout,
                outbound=outbound,
            )
        except Exception as exc:
            return f"refused ({type(exc).__name__}: {str(exc)[:80]})", None
        return "stored", tokens

    rss = peak_rss_mb()
    outcome, _ = await exchange("/huge")
    figures["huge body: peak RSS growth MB"] = round(peak_rss_mb() - rss, 1)
    figures["huge body: outcome"] = outcome

    outcome, tokens = await exchange("/scope")
    figures["2 MB scope: outcome"] = outcome
    with tempfile.TemporaryDirectory() as tmp:
        key = base64.urlsafe_b64encode(KeyRing.generate_key()).rstrip(b"=").decode()
        store = await open_store(f"sqlite:///{Path(tmp) / 's.sqlite3'}", KeyRing.parse(f"k1:{key}"))
        try:
            if tokens is not None:
                connection = Connection(
                    ConnectionKey(UserRef("https://as", "u"), "hub", "1"), tokens, "u", 1.0, 1.0
                )
                await store.put_connection(connection)
                figures["2 MB scope: list_connections entry bytes"] = len(json.dumps(connection.describe()))
            files = [await path.stat() async for path in anyio.Path(tmp).iterdir()]
            figures["2 MB scope: store bytes (database and WAL)"] = sum(f.st_size for f in files)

            started = time.monotonic()
            outcome, _ = await exchange("/drip")
            figures["1 B/s answer: seconds the exchange took"] = round(time.monotonic() - started, 1)
            figures["1 B/s answer: outcome"] = outcome

            figures["slow refresh: refresh requests"] = await slow_refresh(
                base, hub, store, outbound, http_timeout
            )
        finally:
            await store.close()
    await outbound.aclose()
    return figures


async def slow_refresh(base: str, hub: Any, store: Any, outbound: Any, http_timeout: float) -> int:
    """Two callers refresh one stale connection while the provider takes longer than the lock."""
    from service.flow.lifecycle import TokenLifecycle
    from token_store import Connection, ConnectionKey, TokenSet, UserRef

    stale = Connection(
        ConnectionKey(UserRef("https://as", "r"), "hub", "2"),
        TokenSet("old", refresh_token="old-refresh", expires_at=1.0),
        "r",
        1.0,
        1.0,
    )
    await store.put_connection(stale)
    lifecycle = TokenLifecycle(store, outbound, timeout_seconds=http_timeout)
    provider = hub(f"{base}/refresh")

    async def caller() -> None:
        with contextlib.suppress(Exception):  # the outcome is counted at the provider
            await lifecycle.fresh(stale, provider)

    async with anyio.create_task_group() as callers:
        callers.start_soon(caller)
        callers.start_soon(caller)
    async with httpx.AsyncClient() as http:
        return int((await http.get(f"{base}/count")).json()["refreshes"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timeout", type=float, default=2.0, help="http_timeout (seconds)")
    parser.add_argument("--huge-mb", type=int, default=150)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # The refresh answer takes twice the lock's lifetime (http_timeout + 5 s) to arrive.
    refresh_per_byte = 2 * (args.timeout + 5) / len(DRIPPED)
    if args.serve:
        serve(args.serve, args.huge_mb * 1024 * 1024, refresh_per_byte)
        return
    port = free_port()
    command = [sys.executable, "-m", "bench.malicious_provider", "--serve", str(port), *sys.argv[1:]]
    server = subprocess.Popen(command)  # noqa: S603
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                httpx.get(f"{base}/count")
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        figures = anyio.run(measure, base, args.timeout)
    finally:
        server.terminate()
        server.wait()
    for name, value in figures.items():
        print(f"{name:45} {value}")


if __name__ == "__main__":
    main()
