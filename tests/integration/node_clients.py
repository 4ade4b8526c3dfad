"""MCP clients from the npm registry (tests/integration/node), run as child processes of a test.

A client script prints one JSON object per line on stdout (`{"event": ...}`); `NodeClient` reads
them in order, so a test can wait for "the URL is here", act in the browser, then wait for "the
retried call answered". Without Node.js or the installed packages the tests skip locally and fail
in CI (`need_node` in node_servers.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

from tests.integration.node_servers import NODE_DIR

EVENT_TIMEOUT = 30.0  # seconds; the whole flow takes well under one on loopback


class NodeClient:
    """`async with NodeClient(node, script, args, env) as run:` then `await run.expect("result")`."""

    def __init__(self, node: str, script: str, args: list[str], env: dict[str, str], stderr: Path) -> None:
        self.command = [node, str(NODE_DIR / script), *args]
        self.env = {**os.environ, **env}
        self.stderr = stderr
        self.events: list[dict[str, Any]] = []
        self._process: Process | None = None
        self._buffer = ""
        self._lines: TextReceiveStream | None = None

    async def __aenter__(self) -> NodeClient:
        self.stderr.parent.mkdir(parents=True, exist_ok=True)
        with self.stderr.open("ab") as err:
            self._process = await anyio.open_process(
                self.command, cwd=NODE_DIR, env=self.env, stdin=None, stderr=err
            )
        assert self._process.stdout is not None
        self._lines = TextReceiveStream(self._process.stdout)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.returncode is None:
            process.terminate()
        with anyio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()

    async def _next_line(self) -> str:
        assert self._lines is not None
        while "\n" not in self._buffer:
            try:
                self._buffer += await self._lines.receive()
            except anyio.EndOfStream:
                raise AssertionError(
                    f"{self.command[1]} ended without the expected event; events {self.events}, "
                    f"stderr:\n{self.stderr.read_text(errors='replace')[-2000:]}"
                ) from None
        line, self._buffer = self._buffer.split("\n", 1)
        return line

    async def expect(self, kind: str, within: float = EVENT_TIMEOUT) -> dict[str, Any]:
        """The next event of `kind` (within `within` seconds); fails on an "error" event, or when
        the script ends first."""
        with anyio.fail_after(within):
            while True:
                line = await self._next_line()
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a library's stray console output
                if not isinstance(event, dict):
                    continue
                self.events.append(event)
                if event.get("event") == "error" and kind != "error":
                    raise AssertionError(f"{self.command[1]} reported an error: {event}")
                if event.get("event") == kind:
                    return event

    async def exit_code(self) -> int:
        assert self._process is not None
        with anyio.fail_after(EVENT_TIMEOUT):
            return await self._process.wait()
