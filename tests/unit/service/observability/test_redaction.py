"""Log redaction (DESIGN invariant 6): no token, code, verifier, state, cookie or secret in a log line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import httpx2
import jwt
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from service.observability.logs import configure_logging
from service.observability.metrics import Metrics
from service.observability.redaction import REDACTED, RedactingFilter, redact, redact_every_pattern
from service.observability.webhooks import CREATED, ConnectionEvents, WebhookSender
from service.providers.outbound_http import OutboundHttp
from tests.support.webhook_receiver import new_secret
from token_store import ConnectionKey, ConnectionStatus, Store, UserRef

KEY = ConnectionKey(UserRef("https://as.example", "alice"), "mockhub", "42")

# A JWT that looks like an MCP access token (the signing key is irrelevant to redaction).
BEARER_JWT = jwt.encode(
    {"iss": "https://as.example.com", "sub": "alice", "aud": "https://mcp.example.com/mcp"},
    "k" * 32,
    algorithm="HS256",
    headers={"kid": "k1", "typ": "at+jwt"},
)


class ListHandler(logging.Handler):
    """Formats each record into a list, as a real handler would write it."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, ListHandler]]:
    logger = logging.getLogger("tests.redaction")
    handler = ListHandler()
    handler.addFilter(RedactingFilter())
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, handler
    logger.removeHandler(handler)
    logger.propagate = True


def assert_hidden(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} leaked into {text!r}"
    assert REDACTED in text


# ---- redact() ------------------------------------------------------------------------------

LEAKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "callback query": (
        "GET /callback?code=AUTHCODE123&state=STATEVALUE456 HTTP/1.1",
        ("AUTHCODE123", "STATEVALUE456"),
    ),
    "state first": ("/callback?state=STATEVALUE456&code=AUTHCODE123", ("AUTHCODE123", "STATEVALUE456")),
    "authorization bearer": (f"Authorization: Bearer {BEARER_JWT}", (BEARER_JWT, *BEARER_JWT.split("."))),
    "authorization bearer opaque": ("authorization: bearer gho_OPAQUETOKEN99", ("gho_OPAQUETOKEN99",)),
    "authorization basic": ("Authorization: Basic Y2xpZW50OnNlY3JldHZhbHVl", ("Y2xpZW50OnNlY3JldHZhbHVl",)),
    "json access_token": (
        json.dumps({"access_token": "gho_ACCESSVALUE", "token_type": "bearer", "scope": "repo"}),
        ("gho_ACCESSVALUE",),
    ),
    "json compact tokens": (
        '{"access_token":"gho_ACCESSVALUE","refresh_token":"ghr_REFRESHVALUE","id_token":"IDTOKENVALUE"}',
        ("gho_ACCESSVALUE", "ghr_REFRESHVALUE", "IDTOKENVALUE"),
    ),
    "refresh_token form": ("grant_type=refresh_token&refresh_token=ghr_REFRESHVALUE", ("ghr_REFRESHVALUE",)),
    "client_secret form": ("client_id=app&client_secret=CLIENTSECRETVALUE&x=1", ("CLIENTSECRETVALUE",)),
    "code_verifier form": (
        "grant_type=authorization_code&code=AUTHCODE123&code_verifier=VERIFIERVALUE789",
        ("AUTHCODE123", "VERIFIERVALUE789"),
    ),
    "bare jwt": (f"decoded token {BEARER_JWT} for alice", (BEARER_JWT, *BEARER_JWT.split("."))),
    "cookie header": ("Cookie: mcpuc_session=COOKIEVALUE; theme=dark", ("COOKIEVALUE",)),
    "cookie header, any cookie name": (
        "cookie: theme=dark; sid=SIDVALUE; _ga=GAVALUE",
        ("SIDVALUE", "GAVALUE"),
    ),
    "set-cookie header": ("Set-Cookie: mcpuc_session=COOKIEVALUE; HttpOnly; Secure", ("COOKIEVALUE",)),
    "elicitation id": ("GET /connect?elicitationId=ELICITATIONID42 HTTP/1.1", ("ELICITATIONID42",)),
}


@pytest.mark.parametrize(("text", "secrets"), list(LEAKS.values()), ids=list(LEAKS))
def test_redact_removes_secrets(text: str, secrets: tuple[str, ...]) -> None:
    assert_hidden(redact(text), *secrets)


def test_redact_keeps_the_shape_of_a_callback_line() -> None:
    redacted = redact("GET /callback?code=AUTHCODE123&state=STATEVALUE456 HTTP/1.1")
    assert redacted.startswith("GET /callback?code=")
    assert "&state=" in redacted
    assert redacted.endswith(" HTTP/1.1")


@pytest.mark.parametrize(
    "text",
    [
        "user alice connected mockhub in 12 ms",
        "GET /mcp HTTP/1.1 200",
        "provider=mockhub scopes=repo,read:user status=200",
        "",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact(text) == text


# ---- RedactingFilter on a handler -----------------------------------------------------------


def test_uvicorn_access_line_is_redacted_and_args_rendered(
    captured: tuple[logging.Logger, ListHandler],
) -> None:
    logger, handler = captured
    # uvicorn.access formats exactly like this: the path with its query string is an argument.
    logger.info(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:53122",
        "GET",
        "/callback?code=AUTHCODE123&state=STATEVALUE456",
        "1.1",
        302,
    )
    assert len(handler.lines) == 1
    assert_hidden(handler.text, "AUTHCODE123", "STATEVALUE456")
    assert '127.0.0.1:53122 - "GET /callback?code=' in handler.text
    assert handler.text.endswith('HTTP/1.1" 302')


@pytest.mark.parametrize(("text", "secrets"), list(LEAKS.values()), ids=list(LEAKS))
def test_filter_redacts_secrets_passed_as_args(
    captured: tuple[logging.Logger, ListHandler], text: str, secrets: tuple[str, ...]
) -> None:
    logger, handler = captured
    logger.warning("outbound: %s", text)
    assert_hidden(handler.text, *secrets)
    assert "outbound: " in handler.text


@pytest.mark.parametrize(("text", "secrets"), list(LEAKS.values()), ids=list(LEAKS))
def test_filter_redacts_secrets_in_the_message_itself(
    captured: tuple[logging.Logger, ListHandler], text: str, secrets: tuple[str, ...]
) -> None:
    logger, handler = captured
    logger.warning(text.replace("%", "%%"))
    assert_hidden(handler.text, *secrets)


def test_ordinary_record_passes_unchanged_with_args_rendered(
    captured: tuple[logging.Logger, ListHandler],
) -> None:
    logger, handler = captured
    logger.info("connected %s to %s (%d scopes)", "alice", "mockhub", 2)
    assert handler.lines == ["INFO tests.redaction: connected alice to mockhub (2 scopes)"]


def test_filter_never_drops_a_record(captured: tuple[logging.Logger, ListHandler]) -> None:
    logger, handler = captured
    filt = RedactingFilter()
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "token=%s", ("SECRETVALUE",), None)
    assert filt.filter(record) is True
    assert record.args is None
    assert "SECRETVALUE" not in record.getMessage()
    logger.info("plain")
    assert handler.lines == ["INFO tests.redaction: plain"]


def test_bad_format_string_keeps_the_record_but_not_its_args(
    captured: tuple[logging.Logger, ListHandler],
) -> None:
    logger, handler = captured
    # %d with a str: getMessage raises. The argument is an opaque secret no pattern would spot.
    logger.info("exchange failed: %d", "gho_OPAQUESECRET")
    assert len(handler.lines) == 1
    assert "exchange failed" in handler.text
    assert "gho_OPAQUESECRET" not in handler.text


def test_exception_traceback_with_a_code_url_is_redacted(
    captured: tuple[logging.Logger, ListHandler],
) -> None:
    logger, handler = captured
    url = "https://mcp.example.com/callback?code=AUTHCODE123&state=STATEVALUE456"
    try:
        try:
            raise ConnectionError(f"cannot reach {url}")
        except ConnectionError as inner:
            raise RuntimeError(f"token exchange for {url} failed: refresh_token=ghr_REFRESHVALUE") from inner
    except RuntimeError:
        logger.exception("callback failed for %s", "alice")
    text = handler.text
    assert "callback failed for alice" in text
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError" in text and "ConnectionError" in text
    assert_hidden(text, "AUTHCODE123", "STATEVALUE456", "ghr_REFRESHVALUE")


def test_traceback_is_redacted_for_every_later_handler(
    captured: tuple[logging.Logger, ListHandler],
) -> None:
    logger, first = captured
    second = ListHandler()  # no filter of its own: sees the record after the first handler's filter
    logger.addHandler(second)
    try:
        try:
            raise ValueError("GET /callback?code=AUTHCODE123 failed")
        except ValueError:
            logger.exception("boom")
    finally:
        logger.removeHandler(second)
    assert "ValueError" in second.text
    assert "AUTHCODE123" not in first.text + second.text


# ---- configure_logging ----------------------------------------------------------------------


@pytest.fixture
def clean_root() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = handlers  # configure_logging replaces foreign handlers (pytest's too)
    root.setLevel(level)


def redacting_handlers(root: logging.Logger) -> list[logging.Handler]:
    return [h for h in root.handlers if any(isinstance(f, RedactingFilter) for f in h.filters)]


def test_configure_logging_is_idempotent_and_sets_the_level(clean_root: logging.Logger) -> None:
    configure_logging("debug")
    configure_logging("warning")
    assert len(redacting_handlers(clean_root)) == 1
    assert clean_root.level == logging.WARNING


def test_configure_logging_redacts_records_from_library_loggers(
    clean_root: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO")
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:1",
        "GET",
        "/callback?code=AUTHCODE123&state=STATEVALUE456",
        "1.1",
        302,
    )
    logging.getLogger("httpx").info(
        "HTTP Request: POST https://hub.example/token body=client_secret=CLIENTSECRETVALUE"
    )
    err = capsys.readouterr().err
    assert "/callback?code=" in err
    assert "HTTP Request: POST" in err
    assert_hidden(err, "AUTHCODE123", "STATEVALUE456", "CLIENTSECRETVALUE")


def test_configure_logging_replaces_a_handler_that_does_not_redact(
    clean_root: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK's MCPServer calls logging.basicConfig before `serve` configures logging: its plain
    handler must not stay, or every line would also be printed unredacted."""
    clean_root.handlers[:] = []  # as in a fresh process (the fixture puts the suite's back)
    plain = logging.StreamHandler()
    clean_root.addHandler(plain)
    configure_logging("INFO")
    assert plain not in clean_root.handlers
    assert clean_root.handlers == redacting_handlers(clean_root) and len(clean_root.handlers) == 1
    logging.getLogger("mcp.server").info("Terminating session: code=SESSIONSECRET42")
    err = capsys.readouterr().err
    assert err.count("Terminating session") == 1
    assert_hidden(err, "SESSIONSECRET42")


WEBHOOK_URL = "https://hooks.example/services/T0PATHSECRET/B0PATHSECRET/PATHTOKEN?sig=SIGSECRET"
TOKEN_URL = "https://idp.example/tenants/TENANTSECRET/token?api-key=QUERYSECRET"


class TokenEndpoint(httpx2.AsyncBaseTransport):
    """A provider's token endpoint, in process: every request gets a token."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"access_token": "at-1", "token_type": "Bearer"})


async def test_outbound_urls_are_logged_as_scheme_host_and_path_shape_only(
    clean_root: logging.Logger, capsys: pytest.CaptureFixture[str], store: Store
) -> None:
    """httpx logs every request's full URL at INFO, and so does httpx2 under authlib: through the
    real logging configuration, a webhook delivery (its receiver's path secrets and `?sig=`) and
    a token request (a tenant in the path, a key in the query) leave only scheme, host and path
    shape. Both still work: the receiver gets the webhook, the token request its token."""
    configure_logging("INFO")
    delivered: list[str] = []

    async def receive(request: Request) -> Response:
        delivered.append(request.headers["webhook-id"])
        return Response(status_code=204)

    receiver = Starlette(routes=[Route("/services/{team}/{bot}/{token}", receive, methods=["POST"])])
    outbound = OutboundHttp(5.0, pool=httpx.ASGITransport(app=receiver), authlib_pool=TokenEndpoint())
    try:
        await ConnectionEvents(store, enabled=True).emit(
            CREATED, KEY, account_label="octocat", status=ConnectionStatus.OK
        )
        sender = WebhookSender(
            store, outbound.client, WEBHOOK_URL, new_secret(), timeout_seconds=5, metrics=Metrics()
        )
        assert await sender.send_due() == 1 and len(delivered) == 1
        async with AsyncOAuth2Client(client_id="c", **outbound.authlib_options()) as client:
            token = await client.fetch_token(TOKEN_URL, grant_type="client_credentials")
        assert token["access_token"] == "at-1"
    finally:
        await outbound.aclose()
    err = capsys.readouterr().err
    assert "HTTP Request: POST https://hooks.example/*/*/*/* " in err, err
    assert "HTTP Request: POST https://idp.example/*/*/* " in err, err
    for secret in ("PATHSECRET", "PATHTOKEN", "SIGSECRET", "TENANTSECRET", "QUERYSECRET", "sig="):
        assert secret not in err, f"{secret!r} leaked into {err!r}"


# ---- regressions: bugs found in review, fixed ---------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "GET /callback?code=4%2F0AbSECRETTAIL&state=xyz HTTP/1.1",
        "POST body: grant_type=authorization_code&code_verifier=abc%7ESECRETTAIL",
    ],
)
def test_percent_encoded_values_are_redacted_entirely(text: str) -> None:
    assert "SECRETTAIL" not in redact(text)


# ---- the shortcut for lines without secrets -------------------------------------------------

ORDINARY_LINES = [
    '127.0.0.1:54321 - "POST /mcp HTTP/1.1" 200',
    'HTTP Request: GET http://127.0.0.1:8001/mockhub/user "HTTP/1.1 200 OK"',
    '{"account": "1", "event": "token.use", "provider": "mockhub", "sub": "alice", "tool": "whoami"}',
    "tokens rotated; state of the session unchanged",
]
# Lines the shortcut must not skip: names in any case, names ending in a field name, and
# non-ASCII letters the patterns' (?i) equates with ASCII ones (U+017F "long s", U+212A Kelvin).
TRICKY_LINES = [
    "GET /cb?CODE=AUTHCODE123 HTTP/1.1",
    "x-state = 'STATEVALUE456'",
    "mcpuc_Session=COOKIEVALUE",
    "elicitation_id%3DELICITATIONID42",
    '{"requestState" : "REQUESTSTATE7"}',
    "GET /cb?\u017ftate=STATEVALUE456 HTTP/1.1",
    "GET /cb?to\u212aen=TOKENVALUE HTTP/1.1",
    "AUTHORIZATION: BEARER gho_OPAQUETOKEN99",
    f"(jwt){BEARER_JWT}",
]


@pytest.mark.parametrize("text", ORDINARY_LINES)
def test_lines_without_secrets_skip_the_patterns_unchanged(text: str) -> None:
    assert redact(text) is text  # the shortcut: not even a copy
    assert redact_every_pattern(text) == text


@pytest.mark.parametrize(
    "text",
    [*TRICKY_LINES, *(text for text, _ in LEAKS.values())],
)
def test_the_shortcut_never_skips_what_the_patterns_redact(text: str) -> None:
    assert redact_every_pattern(text) != text, "not a line with a secret"
    assert redact(text) == redact_every_pattern(text)
