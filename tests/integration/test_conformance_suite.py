"""The official MCP conformance suite against our server, both release lines (docs/conformance.md).

The demo stack runs in process (the mcpuc kit); the suite's CLI (tests/integration/conformance,
`install.sh` first) runs as a child process against a loopback proxy that adds a dev bearer token
(the suite cannot send one). Every check must pass, except the ones listed below as not applicable
with the reason; a listed one that starts passing fails the test too, so the list stays exact.

Most scenarios drive fixture tools of the suite's own reference server (`test_simple_text`,
`test_elicitation`, ...) or features this server does not serve (prompts, resources, logging,
completions, the tasks extension). What they check of us is that an unknown tool is JSON-RPC
-32602 and an unserved method -32601, which the passing checks of those scenarios (the wire
schema) and tests/e2e/test_operability.py cover.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from mock_providers.testing import Mcpuc
from tests.support import conformance_suite
from tests.support.bearer_proxy import BearerProxy
from tests.support.conformance_suite import Check

pytestmark = pytest.mark.integration

# Each run: the line (npm alias) and its arguments. The stable line runs every scenario it has
# (`--suite all`, pending ones included); the alpha line runs what each revision requires, at that
# revision's wire (`--requirements`), with the extensions and pending scenarios it reports unscored.
RUNS = {
    "stable": ("stable", ["--suite", "all"]),
    "alpha-2025-11-25": ("alpha", ["--requirements", "2025-11-25"]),
    "alpha-2026-07-28": ("alpha", ["--requirements", "2026-07-28"]),
}

# The suite's client opens a session and a GET stream per scenario on the stable line and closes
# neither until it exits; all of them are one user's (the proxy's token). Room for that, and the
# per-user caps themselves are tested in tests/unit/service/mcp/sdk/test_session_limits.py.
CAP = 1000

TEST_TOOL = "calls a fixture tool of the suite's reference server; ours answers an unknown tool -32602"
NO_PROMPTS = "prompts: not served, so not declared, and prompts/* is -32601"
NO_RESOURCES = "resources: not served, so not declared, and resources/* is -32601"
NO_LOGGING = "logging: not declared, and logging/setLevel is -32601"
NO_COMPLETIONS = "completions: not declared, and completion/complete is -32601"
NO_TASKS = "the tasks extension (SEP-2663): not served, not declared; the suite does not score it"
NO_X_MCP_HEADER = "needs a tool whose parameters carry x-mcp-header (SEP-2243); ours have none"
STABLE_SSE_POLLING = (
    "the 0.1.16 client sends MCP-Protocol-Version 2025-03-26 here, and a client before 2025-11-25 "
    "gets no priming event (it could not parse one); the alpha line checks it at 2025-11-25"
)
RECONNECTION_TOOL = "needs the suite's test_reconnection tool, which closes its stream mid-call"

SHARED_2025 = {
    "completion-complete": NO_COMPLETIONS,
    "logging-set-level": NO_LOGGING,
    "tools-call-with-logging": NO_LOGGING,
    **dict.fromkeys(
        [
            "tools-call-simple-text",
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-error",
            "tools-call-with-progress",
            "tools-call-sampling",
            "tools-call-elicitation",
            "elicitation-sep1034-defaults",
            "elicitation-sep1330-enums",
            "json-schema-2020-12",
        ],
        TEST_TOOL,
    ),
    **dict.fromkeys(
        [
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
        ],
        NO_RESOURCES,
    ),
    **dict.fromkeys(
        [
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
        ],
        NO_PROMPTS,
    ),
}

# Scenarios every check of which passes.
PASSES = {
    "stable": {
        "server-initialize",
        "ping",
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    },
    "alpha-2025-11-25": {
        "server-initialize",
        "server-session-lifecycle",
        "ping",
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    },
    "alpha-2026-07-28": {
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
        "http-header-validation",
        "input-required-result-unsupported-methods",
        "input-required-result-validate-input",
    },
}

# Not applicable: "scenario" (all of it) or "scenario:check-id" (that check) -> why.
NOT_APPLICABLE: dict[str, dict[str, str]] = {
    "stable": {**SHARED_2025, "server-sse-polling": STABLE_SSE_POLLING},
    "alpha-2025-11-25": {
        **SHARED_2025,
        # Its priming-event and retry checks pass (service/mcp/sdk/sse_resumption.py).
        "server-sse-polling:server-sse-disconnect-resume": RECONNECTION_TOOL,
    },
    "alpha-2026-07-28": {
        **{
            name: reason
            for name, reason in SHARED_2025.items()
            if name
            not in {
                "logging-set-level",  # removed in 2026-07-28
                "tools-call-with-logging",
                "tools-call-sampling",
                "tools-call-elicitation",
                "elicitation-sep1034-defaults",
                "elicitation-sep1330-enums",
                "resources-subscribe",
                "resources-unsubscribe",
            }
        },
        **{
            f"server-stateless:sep-2575-{check}": f"{TEST_TOOL} ({tool})"
            for check, tool in [
                ("server-rejects-undeclared-capability", "test_missing_capability"),
                ("missing-capability-http-400", "test_missing_capability"),
                ("http-server-no-independent-requests-on-stream", "test_streaming_elicitation"),
                ("server-no-log-without-loglevel", "test_logging_tool"),
            ]
        },
        "caching:sep-2549-prompts-list-caching-hints": NO_PROMPTS,
        "caching:sep-2549-resources-list-caching-hints": NO_RESOURCES,
        "caching:sep-2549-resources-templates-list-caching-hints": NO_RESOURCES,
        "sep-2164-resource-not-found": NO_RESOURCES,
        "http-custom-header-server-validation": NO_X_MCP_HEADER,
        **dict.fromkeys(
            [
                "input-required-result-basic-elicitation",
                "input-required-result-basic-sampling",
                "input-required-result-basic-list-roots",
                "input-required-result-request-state",
                "input-required-result-multiple-input-requests",
                "input-required-result-multi-round",
                "input-required-result-missing-input-response",
                "input-required-result-result-type",
                "input-required-result-tampered-state",
                "input-required-result-capability-check",
                "input-required-result-ignore-extra-params",
            ],
            TEST_TOOL + " (ours are tested in tests/e2e/test_request_state.py)",
        ),
        "input-required-result-non-tool-request": f"asks prompts/get for input; {NO_PROMPTS}",
        **dict.fromkeys(
            [
                "tasks-lifecycle",
                "tasks-capability-negotiation",
                "tasks-wire-fields",
                "tasks-request-state-removal",
                "tasks-mrtr-input",
                "tasks-request-headers",
                "tasks-dispatch-and-envelope",
                "tasks-status-notifications",
                "tasks-required-task-error",
                "tasks-mrtr-composition",
            ],
            NO_TASKS,
        ),
    },
}


@pytest.fixture(scope="module")
def suite_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The MCP endpoint behind the bearer-adding proxy, for user `conformance`."""
    stack = Mcpuc(
        tmp_path_factory.mktemp("conformance") / "data", max_sessions_per_user=CAP, max_requests_per_user=CAP
    ).start()
    try:
        mcp = urlsplit(stack.mcp_url)
        with BearerProxy(f"{mcp.scheme}://{mcp.netloc}", stack.token("conformance")) as proxy:
            yield proxy.url + mcp.path
    finally:
        stack.stop()


def covers(not_applicable: dict[str, str], check: Check) -> bool:
    return check.scenario in not_applicable or f"{check.scenario}:{check.id}" in not_applicable


def stale(not_applicable: dict[str, str], results: dict[str, list[Check]]) -> list[str]:
    """N/A entries that no longer fail: a whole scenario with a success and no finding, or a
    check that passes (or no longer exists)."""
    found = []
    for key in not_applicable:
        scenario, _, check_id = key.partition(":")
        checks = results.get(scenario, [])
        if check_id:
            if not any(c.id == check_id and not c.passing for c in checks):
                found.append(key)
        elif all(c.passing for c in checks) and any(c.status == "SUCCESS" for c in checks):
            found.append(key)
    return found


@pytest.mark.parametrize("run", RUNS)
def test_conformance_suite(suite_url: str, run: str, tmp_path: Path) -> None:
    line, args = RUNS[run]
    command = conformance_suite.need_suite(line)
    results = conformance_suite.run(command, suite_url, args, tmp_path / "results")
    not_applicable = NOT_APPLICABLE[run]

    expected = PASSES[run] | {key.partition(":")[0] for key in not_applicable}
    assert set(results) == expected, "scenarios run differ from those this test knows"
    findings = [c for checks in results.values() for c in checks if not c.passing]
    unexplained = [
        f"{c.scenario}:{c.id} {c.status}: {c.message}" for c in findings if not covers(not_applicable, c)
    ]
    assert unexplained == []
    assert stale(not_applicable, results) == [], "now passing: remove from NOT_APPLICABLE"
    for scenario in PASSES[run]:
        assert any(c.status == "SUCCESS" for c in results[scenario]), f"{scenario} checked nothing"
