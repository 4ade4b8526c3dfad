"""Run ASGI apps under uvicorn on free loopback ports, in a background thread with its own loop."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from mock_providers import create_mock_providers_app
from mock_providers.demo import Demo, build_demo
from service.app import create_app

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ThreadedServers:
    """Several apps served from one background thread and event loop."""

    def __init__(self, apps: list[tuple[Any, int]]) -> None:
        self._servers = [
            uvicorn.Server(uvicorn.Config(app, host=HOST, port=port, log_config=None)) for app, port in apps
        ]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        async def serve() -> None:
            await asyncio.gather(*(s.serve() for s in self._servers))

        self._thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not all(s.started for s in self._servers):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("servers did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        for server in self._servers:
            server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)


@dataclass
class DemoServers:
    """Both listeners of the demo: the MCP server and the dev AS + mockhub."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    providers_port: int = field(default_factory=free_port)
    overrides: dict[str, Any] = field(default_factory=dict)
    demo: Demo = field(init=False)
    apps: dict[str, Any] = field(init=False, default_factory=dict)
    _threaded: ThreadedServers | None = field(init=False, default=None)

    def start(self) -> DemoServers:
        self.demo = build_demo(HOST, self.port, self.providers_port, self.data_dir, **self.overrides)
        self.apps = {
            "providers": create_mock_providers_app(self.demo.providers),
            "mcp": create_app(self.demo.settings),
        }
        self._threaded = ThreadedServers(
            [(self.apps["providers"], self.providers_port), (self.apps["mcp"], self.port)]
        )
        self._threaded.start()
        return self

    def stop(self) -> None:
        if self._threaded is not None:
            self._threaded.stop()

    @property
    def mcp_url(self) -> str:
        return self.demo.settings.resource_url

    @property
    def public_url(self) -> str:
        return self.demo.settings.public_url

    @property
    def mockhub(self) -> Any:
        return self.apps["providers"].state.mockhub

    @property
    def store_file(self) -> Path:
        return self.data_dir.resolve() / "store.sqlite3"
