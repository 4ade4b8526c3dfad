"""The official MCP conformance suite's client authorization scenarios (`auth/*`), passed by our
downstream connector (docs/gateway.md, docs/conformance.md).

For each scenario the suite starts an OAuth-protected MCP server and its authorization server,
then runs tests/support/conformance_client.py with the server's URL: our server starts with it as
a `kind = "mcp"` provider (discovery, registration), an MCP client of ours calls its tool through
our server, the scripted browser walks each connect link (sign-in at our development authorization
server, our confirmation page, the scenario's authorization server), and the retried call returns
the scenario server's answer. The suite judges every request our server sent it. Every check must
pass, but for the ones listed below with the reason; a listed one that passes fails the test.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import conformance_suite
from tests.support.conformance_suite import Check

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
CLIENT = f"env PYTHONPATH={REPO} {sys.executable} {REPO / 'tests' / 'support' / 'conformance_client.py'}"

# The client scenarios of the `auth` suite, at both revisions (run in parallel).
AUTH_SUITE = {
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
}
# What 2026-07-28 requires besides (run one at a time: `--scenario`).
ONLY_2026 = [
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
]
NOT_APPLICABLE: dict[str, dict[str, str]] = {"2025-11-25": {}, "2026-07-28": {}}


def judged(results: dict[str, list[Check]], not_applicable: dict[str, str]) -> list[str]:
    """Every check that is neither passing nor listed, as `scenario:check status: message`."""
    return [
        f"{c.scenario}:{c.id} {c.status}: {c.message}"
        for checks in results.values()
        for c in checks
        if not c.passing and f"{c.scenario}:{c.id}" not in not_applicable
    ]


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_client_auth_scenarios(revision: str, tmp_path: Path) -> None:
    command = conformance_suite.need_suite("alpha")
    version = ["--spec-version", revision]
    results = conformance_suite.run_client(command, CLIENT, ["--suite", "auth", *version], tmp_path / "suite")
    if revision == "2026-07-28":
        for scenario in ONLY_2026:
            results |= conformance_suite.run_client(
                command, CLIENT, ["--scenario", scenario, *version], tmp_path / scenario.replace("/", "-")
            )
    expected = AUTH_SUITE | (set(ONLY_2026) if revision == "2026-07-28" else set())
    assert set(results) == expected
    not_applicable = NOT_APPLICABLE[revision]
    assert judged(results, not_applicable) == []
    passing = {f"{c.scenario}:{c.id}" for checks in results.values() for c in checks if c.passing}
    assert not set(not_applicable) & passing, "now passing: remove from NOT_APPLICABLE"
    for scenario, checks in results.items():
        assert any(c.status == "SUCCESS" for c in checks), f"{scenario} checked nothing"
