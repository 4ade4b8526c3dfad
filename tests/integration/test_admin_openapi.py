"""docs/admin-openapi.json, checked against the admin API as `serve` runs it (its own port, over a
socket) by schemathesis: what the document allows, and what it does not, gets an answer the
document describes (status, content type, body schema, `Allow` on 405), never a 500; a request
without the token is refused. So the document and the routes cannot drift apart."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from mock_providers.testing.servers import DemoServers, free_port

ROOT = Path(__file__).resolve().parents[2]
STATIC_TOKEN = secrets.token_urlsafe(32)
# The token as the document's security scheme, so schemathesis knows which header is the
# credential (and also sends requests without it, which must be refused).
CONFIG = SchemathesisConfig.from_dict({"auth": {"openapi": {"adminBearer": {"bearer": STATIC_TOKEN}}}})
SCHEMA = schemathesis.openapi.from_path(ROOT / "docs" / "admin-openapi.json", config=CONFIG)


@pytest.fixture(scope="module")
def admin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo with its admin API on a port of its own; its store holds no connection, so a
    generated revoke-all paced at any rate ends at once."""
    port = free_port()
    overrides = {
        "admin_port": port,
        "admin_audience": "https://admin.mcp.example/",
        "admin_token_sha256": hashlib.sha256(STATIC_TOKEN.encode()).hexdigest(),
    }
    servers = DemoServers(tmp_path_factory.mktemp("admin-openapi"), overrides=overrides).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        servers.stop()


@SCHEMA.parametrize()
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_admin_api_answers_as_its_openapi_document_says(case: schemathesis.Case, admin_url: str) -> None:
    case.call_and_validate(base_url=admin_url)
