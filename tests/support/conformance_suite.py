"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`), run against a server.

Both release lines are installed side by side under npm aliases in tests/integration/conformance
(`install.sh`): `stable` and `alpha` (the line with the 2026-07-28 scenarios). `run` starts one
line's CLI (`conformance server --url ...`) as a child process and reads back what it wrote: one
directory per scenario with a `checks.json`, each check `SUCCESS`, `FAILURE`, `WARNING`, `INFO` or
`SKIPPED`. Without Node.js 22 or the installed packages the tests skip locally and fail in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.needs import skip_or_fail_in_ci

SUITE_DIR = Path(__file__).resolve().parents[1] / "integration" / "conformance"
NODE_MODULES = SUITE_DIR / "node_modules"
LINES = {"stable": "conformance-stable", "alpha": "conformance-alpha"}  # npm aliases (package.json)
INSTALL_HINT = "bash tests/integration/conformance/install.sh"
NODE_MINIMUM = (22, 0)  # the suite's CLI imports fs.globSync, new in Node 22
RUN_TIMEOUT = 120.0  # seconds for one run of a line (it takes a few seconds here)
# Not a finding: the check passed, only reported what it saw, or the suite found nothing to test.
PASSING = frozenset({"SUCCESS", "INFO", "SKIPPED"})
# `server-<scenario>-<ISO timestamp>`: the directory the CLI writes a scenario's checks.json to.
RESULT_DIR = re.compile(r"server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z")


@dataclass(frozen=True)
class Check:
    scenario: str
    id: str
    status: str
    message: str

    @property
    def passing(self) -> bool:
        return self.status in PASSING


def _node_version(node: str) -> tuple[int, int]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False)
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+\s*", out.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def need_suite(line: str) -> list[str]:
    """The command that runs `line`'s CLI (`[node, .../dist/index.js]`), or skip (fail in CI)."""
    __tracebackhide__ = True
    script = NODE_MODULES / LINES[line] / "dist" / "index.js"
    if not script.is_file():
        skip_or_fail_in_ci(f"the MCP conformance suite ({LINES[line]}) in {NODE_MODULES}", INSTALL_HINT)
    # install.sh puts Node 22 at node_modules/.bin/node on linux-x64; elsewhere, `node` from PATH.
    local = NODE_MODULES / ".bin" / "node"
    candidates = [str(local)] if os.access(local, os.X_OK) else []
    if found := shutil.which("node"):
        candidates.append(found)
    for node in candidates:
        if _node_version(node) >= NODE_MINIMUM:
            return [node, str(script)]
    skip_or_fail_in_ci(
        f"Node.js >= 22 for the conformance suite (found {candidates or 'none'})", INSTALL_HINT
    )


def run(command: list[str], url: str, args: list[str], output_dir: Path) -> dict[str, list[Check]]:
    """Run `conformance server --url url *args`; every scenario's checks, by scenario name.

    The CLI's exit status is not used: it fails on any finding, N/A ones included; the caller
    judges the checks instead. A run that wrote no results at all raises, with its output."""
    return _run_cli([*command, "server", "--url", url, *args], output_dir, RUN_TIMEOUT, read_results)


def _run_cli(
    argv: list[str],
    output_dir: Path,
    timeout: float,
    read: Callable[[Path], dict[str, list[Check]]],
) -> dict[str, list[Check]]:
    output_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [*argv, "--output-dir", str(output_dir)],
        cwd=SUITE_DIR,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    results = read(output_dir)
    if not results:
        raise RuntimeError(
            f"the conformance suite wrote no results (exit {done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return results


def read_results(output_dir: Path) -> dict[str, list[Check]]:
    results: dict[str, list[Check]] = {}
    for path in sorted(output_dir.glob("*/checks.json")):
        match = RESULT_DIR.fullmatch(path.parent.name)
        if match is None:
            continue
        scenario = match["scenario"]
        results[scenario] = [
            Check(scenario, str(c["id"]), str(c["status"]), str(c.get("errorMessage") or ""))
            for c in json.loads(path.read_text())
        ]
    return results


# `<scenario>-<ISO timestamp>` under `auth/` for the auth scenarios: a client scenario's directory.
CLIENT_RESULT_DIR = re.compile(r"(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z")
CLIENT_RUN_TIMEOUT = 900.0  # a client scenario starts a whole stack of ours; the auth ones take minutes


def run_client(command: list[str], client: str, args: list[str], output_dir: Path) -> dict[str, list[Check]]:
    """Run `conformance client --command <client> *args`: every scenario's checks, by scenario name
    (`auth/metadata-default`, ...). `client` is the shell command the suite runs with the scenario
    server's URL appended. As `run`, the CLI's exit status is not used."""
    argv = [*command, "client", "--command", client, *args]
    return _run_cli(argv, output_dir, CLIENT_RUN_TIMEOUT, read_client_results)


def read_client_results(output_dir: Path) -> dict[str, list[Check]]:
    results: dict[str, list[Check]] = {}
    for path in sorted(output_dir.glob("**/checks.json")):
        match = CLIENT_RESULT_DIR.fullmatch(path.parent.name)
        if match is None:
            continue
        folder = path.parent.parent.relative_to(output_dir)
        scenario = f"{folder}/{match['scenario']}" if str(folder) != "." else match["scenario"]
        results[scenario] = [
            Check(scenario, str(c["id"]), str(c["status"]), str(c.get("errorMessage") or ""))
            for c in json.loads(path.read_text())
        ]
    return results
