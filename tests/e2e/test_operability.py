"""What a client and an operator see when a flow fails: the completion notification for failed
and expired flows, a retry that says what happened, metrics, JSON log lines joined by the flow
id, request ids, and OpenTelemetry spans. Real sockets, the SDK client, the scripted browser."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from mock_providers.testing.browser import FlowError
from mock_providers.testing.stack import Mcpuc
from service.observability.logs import JsonFormatter, LogContextFilter
from service.observability.redaction import RedactingFilter
from service.observability.tracing import tracing_with
from tests.support.settle import wait_until

MODES = ("legacy", "2026-07-28")


def text_of(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """Every log line of the process, as production writes it with MCPUC_LOG_FORMAT=json."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    handler.addFilter(LogContextFilter("mcp-test"))
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def scrape(mcpuc: Mcpuc) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5) as http:
        return await http.get(mcpuc.servers.metrics_url)


async def metric(mcpuc: Mcpuc, name: str, **labels: str) -> float:
    text = (await scrape(mcpuc)).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def test_a_denied_flow_is_notified_and_the_legacy_retry_says_so_once(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("alice", "legacy") as client:
        link = await mcpuc.connect_url(client, "whoami")
        await mcpuc.browser("alice").deny(link.url)
        # 2025-11-25: the client hears that the flow ended, though it ended without a connection.
        await mcpuc.recorder(client).wait_completed(link.elicitation_id)
        retry = await client.call_tool("whoami", {})
        assert retry.is_error and "was declined" in text_of(retry)
        assert "Call the tool again" in text_of(retry)
        # The call after that asks again, with a new link.
        again = await mcpuc.connect_url(client, "whoami")
        assert again.elicitation_id != link.elicitation_id
    assert await metric(mcpuc, "mcpuc_elicitations_finished_total", provider="mockhub", outcome="denied") == 1
    assert await metric(mcpuc, "mcpuc_completion_notifications_total", outcome="delivered") == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_provider_failure_is_told_to_the_client(mcpuc: Mcpuc, mode: str) -> None:
    mcpuc.providers.fail_token_endpoint("500")
    async with mcpuc.client("alice", mode) as client:
        link = await mcpuc.connect_url(client, "whoami")
        with pytest.raises(FlowError):
            await mcpuc.browser("alice").approve(link.url)
        retry = await mcpuc.retry(client, link, "whoami")
        assert retry.is_error and "failed while connecting" in text_of(retry), text_of(retry)
    finished = await metric(
        mcpuc, "mcpuc_elicitations_finished_total", provider="mockhub", outcome="provider_error"
    )
    assert finished == 1


async def test_an_expired_link_is_notified_and_the_retry_says_it_expired(tmp_path: Path) -> None:
    stack = Mcpuc(tmp_path / "stack", elicitation_ttl=1).start()
    try:
        async with stack.client("alice", "legacy") as client:
            link = await stack.connect_url(client, "whoami")
            # The hub's sweep (every second) tells the session; no browser ever opened the link.
            await stack.recorder(client).wait_completed(link.elicitation_id, timeout=5)
            retry = await client.call_tool("whoami", {})
            assert retry.is_error and "expired" in text_of(retry)
        assert await metric(stack, "mcpuc_elicitations_finished_total", outcome="expired") == 1
    finally:
        stack.stop()


async def test_metrics_count_the_flow_and_carry_no_user_or_url(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("alice-metrics", "legacy") as client:
        link = await mcpuc.connect_url(client, "whoami")
        await mcpuc.browser("alice-metrics").approve(link.url)
        result = await mcpuc.retry(client, link, "whoami")
        assert not result.is_error
    response = await scrape(mcpuc)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    assert (
        await metric(mcpuc, "mcpuc_elicitations_created_total", provider="mockhub", revision="2025-11-25")
        == 1
    )
    assert await metric(mcpuc, "mcpuc_elicitations_finished_total", outcome="completed") == 1
    assert await metric(mcpuc, "mcpuc_tool_calls_total", tool="whoami", result="elicitation") == 1
    assert await metric(mcpuc, "mcpuc_tool_calls_total", tool="whoami", result="ok") == 1
    assert await metric(mcpuc, "mcpuc_flow_duration_seconds_count", provider="mockhub") == 1
    for step in ("token", "userinfo"):
        assert await metric(mcpuc, "mcpuc_provider_call_duration_seconds_count", step=step) == 1
    for forbidden in ("alice-metrics", link.elicitation_id, "http://", "octocat"):
        assert forbidden not in response.text


async def test_an_unknown_tool_name_does_not_become_a_label(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("alice", "legacy") as client:
        with pytest.raises(MCPError):
            await client.call_tool("no-such-tool-" + "x" * 20, {})
    text = (await scrape(mcpuc)).text
    assert "no-such-tool" not in text and 'tool="unknown"' in text


async def test_json_logs_join_a_failure_to_the_flows_creation(mcpuc: Mcpuc, json_logs: io.StringIO) -> None:
    mcpuc.providers.fail_token_endpoint("500")
    async with mcpuc.client("alice", "legacy") as client:
        link = await mcpuc.connect_url(client, "whoami")
        with pytest.raises(FlowError):
            await mcpuc.browser("alice").approve(link.url)
        await mcpuc.recorder(client).wait_completed(link.elicitation_id)
    records = lines(json_logs)
    [failed] = [r for r in records if r["message"].startswith("flow failed")]
    assert "provider=mockhub" in failed["message"] and "outcome=provider_error" in failed["message"]
    assert "step=token" in failed["message"]
    [created] = [r for r in records if r["message"].startswith("flow created")]
    assert created["flow_id"] == failed["flow_id"] and created["user_key"] == failed["user_key"]
    assert created["request_id"] != failed["request_id"]  # two requests: the tool call, the callback
    assert all(r["replica"] == "mcp-test" for r in records)
    everything = json_logs.getvalue()
    assert link.elicitation_id not in everything  # a capability: never in the logs


def test_request_id_round_trip(mcpuc: Mcpuc) -> None:
    given = httpx.get(mcpuc.servers.public_url + "/healthz", headers={"X-Request-ID": "edge-7"}, timeout=5)
    assert given.headers["x-request-id"] == "edge-7"
    fresh = httpx.get(mcpuc.servers.public_url + "/healthz", timeout=5)
    assert len(fresh.headers["x-request-id"]) == 32
    hostile = httpx.get(
        mcpuc.servers.public_url + "/healthz", headers={"X-Request-ID": "a b<script>"}, timeout=5
    )
    assert hostile.headers["x-request-id"] != "a b<script>"


async def test_tool_calls_and_flow_steps_are_traced_with_the_flow_id(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    stack = Mcpuc(tmp_path / "stack", tracing=tracing_with(SimpleSpanProcessor(exporter))).start()
    try:
        async with stack.client("alice", "legacy") as client:
            link = await stack.connect_url(client, "whoami")
            await stack.browser("alice").approve(link.url)
            await stack.retry(client, link, "whoami")
    finally:
        stack.stop()
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert names.count("tool_call") == 2 and "flow.created" in names and "flow.completed" in names
    flow_ids = {s.attributes.get("flow_id") for s in spans if s.name.startswith("flow.")}
    assert len(flow_ids) == 1 and None not in flow_ids
    for span in spans:
        assert link.elicitation_id not in json.dumps(dict(span.attributes or {}))


@pytest.mark.parametrize("mode", MODES)
async def test_only_what_is_served_is_advertised(mcpuc: Mcpuc, mode: str) -> None:
    """No prompts or resources here: neither declared nor answered as if they existed."""
    async with mcpuc.client("alice", mode) as client:
        if mode == "legacy":  # 2025-11-25 declares capabilities in `initialize`
            capabilities = client.server_capabilities
            assert capabilities is not None
            assert capabilities.prompts is None and capabilities.resources is None
            assert capabilities.tools is not None and not capabilities.tools.list_changed
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("nothing-here")
        assert prompt.value.error.code == -32601
        tools = await client.list_tools()
        assert "whoami" in {t.name for t in tools.tools}


async def test_a_refresh_in_flight_shows_as_refreshing_and_is_counted(mcpuc: Mcpuc) -> None:
    async with mcpuc.client("alice", "legacy") as client:
        link = await mcpuc.connect_url(client, "whoami")
        await mcpuc.browser("alice").approve(link.url)
        assert not (await mcpuc.retry(client, link, "whoami")).is_error
        mcpuc.providers.expire_access_tokens()
        mcpuc.providers.fail_token_endpoint("hang", hang_seconds=1.5)
        outcome: list[CallToolResult] = []

        async def call_during_a_hanging_refresh() -> None:
            # 401, then a refresh that hangs, then fails: a tool error the model can read
            outcome.append(await client.call_tool("whoami", {}))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call_during_a_hanging_refresh)
            async with mcpuc.client("alice", "legacy") as other:

                async def refreshing() -> bool:
                    listed = await other.call_tool("list_connections", {})
                    return [c["status"] for c in listed.structured_content["result"]] == ["refreshing"]

                await wait_until(refreshing, "the connection listed as refreshing", within=5, poll=0.05)
        listed = await client.call_tool("list_connections", {})
        assert [c["status"] for c in listed.structured_content["result"]] != ["refreshing"]
        [failed] = outcome  # the provider failed: a clear error, not a hang
        assert failed.is_error and isinstance(failed.content[0], TextContent), failed
        assert "refresh" in failed.content[0].text, failed.content[0].text
    assert await metric(mcpuc, "mcpuc_token_refreshes_total", provider="mockhub", outcome="failed") == 1
