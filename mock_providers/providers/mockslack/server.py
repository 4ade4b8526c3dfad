"""MockSlack: a Slack-like OAuth v2 provider ("Sign in"/"Add to Slack") for development and tests.

Built from authlib's authorization code grant with mandatory S256 PKCE and
client authentication. What makes it Slack-like:

* bot scopes come in ``scope``, user scopes in ``user_scope``, both
  comma-separated; ``response_type`` is optional at ``/authorize`` and
  ``grant_type`` at ``oauth.v2.access``;
* one code exchange returns two tokens in Slack's shape: a bot token
  (``xoxb-...``, top level, only when bot scopes were asked for) and a user
  token (``xoxp-...``, under ``authed_user``, only with ``user_scope``);
* Web API style answers: errors are ``200 {"ok": false, "error": "..."}``;
* tokens do not expire and there is no refresh (Slack without token rotation);
  ``auth.revoke`` revokes the one token presented.

:class:`MockSlack` (``app.state.mockslack``) holds the state, knobs and
counters; docs/mock-providers.md describes them.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import InvalidScopeError, OAuth2Request

from mock_providers.clients import PreRegisteredClient
from mock_providers.config import ClientSpec
from mock_providers.oauth.pkce import RequiredS256CodeChallenge
from mock_providers.oauth.server import (
    MockProvider,
    ProviderAuthorizationServer,
    ProviderCode,
    ProviderCodeGrant,
)
from mock_providers.providers.mockslack.api import SlackApi
from mock_providers.providers.mockslack.formats import slack_id, split_scopes
from mock_providers.store import DurableMap, MockStore, RecordCodec

BOT_TOKEN_PREFIX = "xoxb-"
USER_TOKEN_PREFIX = "xoxp-"
LOGIN_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
LOGIN_RULE = "A MockSlack user name is 1-80 letters, digits, dots, underscores or hyphens."
DEFAULT_TEAM_ID = "T0MOCKTEAM"
DEFAULT_TEAM_NAME = "MockSlack Workspace"
BOT_NAME = "mockslack-bot"
TokenKind = Literal["bot", "user"]


@dataclass(frozen=True)
class MockSlackAccount:
    """A MockSlack user; ``id`` is derived from the login, so it is stable everywhere."""

    id: str
    login: str

    @classmethod
    def for_login(cls, login: str) -> MockSlackAccount | None:
        login = login.strip()
        if not LOGIN_PATTERN.match(login):
            return None
        return cls(id=slack_id("U", "user:" + login.lower()), login=login)

    def get_user_id(self) -> str:
        return self.id


@dataclass(frozen=True)
class MockSlackInstall:
    """What authlib binds to a code: who approved it and the user scopes asked for."""

    account: MockSlackAccount
    user_scope: str

    def get_user_id(self) -> str:
        return self.account.id


@dataclass(kw_only=True)
class MockSlackCode(ProviderCode):
    user_scope: str
    login: str


@dataclass
class MockSlackToken:
    """A bot or user token. ``user_id``/``user`` are what ``auth.test`` reports."""

    token: str
    kind: TokenKind
    client_id: str
    scope: str
    team_id: str
    user_id: str
    user: str
    installer: str
    install_id: str
    issued_at: float
    revoked: bool = False


class MockSlackClient(PreRegisteredClient):
    """The app: Slack scopes are comma-separated, and there is no refresh."""

    def get_allowed_scope(self, scope: str | None) -> str:
        return ",".join(split_scopes(scope))


class RequireSomeScope:
    """Slack refuses an authorization that asks for neither bot nor user scopes."""

    def __call__(self, grant: Any) -> None:
        grant.register_hook("after_validate_authorization_request_payload", self.check)

    def check(self, grant: Any, _result: Any) -> None:
        data = grant.request.payload.data
        if not split_scopes(data.get("scope")) and not split_scopes(data.get("user_scope")):
            raise InvalidScopeError("Ask for bot scopes ('scope'), user scopes ('user_scope'), or both.")


class MockSlackCodeGrant(ProviderCodeGrant["MockSlack"]):
    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        account: MockSlackAccount = request.user
        self.store.codes[code] = MockSlackCode(
            **self.code_fields(code, request),
            user_scope=",".join(split_scopes(request.payload.data.get("user_scope"))),
            login=account.login,
        )

    def authenticate_user(self, authorization_code: MockSlackCode) -> MockSlackInstall | None:
        account = MockSlackAccount.for_login(authorization_code.login)
        if account is None:
            return None
        return MockSlackInstall(account=account, user_scope=authorization_code.user_scope)


class MockSlackTokenGenerator:
    """Builds ``oauth.v2.access``'s answer: bot token at the top, user token under ``authed_user``."""

    def __init__(self, slack: MockSlack) -> None:
        self.slack = slack

    def __call__(
        self,
        grant_type: str,
        client: PreRegisteredClient,
        user: MockSlackInstall | None = None,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        assert user is not None  # authlib refuses the exchange without a user
        slack = self.slack
        authed_user: dict[str, Any] = {"id": user.account.id}
        token: dict[str, Any] = {"ok": True, "app_id": slack.app_id}
        if scope:
            token.update(
                access_token=BOT_TOKEN_PREFIX + str(generate_token(40)),
                token_type="bot",
                scope=scope,
                bot_user_id=slack.bot_user_id,
            )
        if user.user_scope:
            authed_user.update(
                scope=user.user_scope,
                access_token=USER_TOKEN_PREFIX + str(generate_token(40)),
                token_type="user",
            )
        token.update(
            authed_user=authed_user,
            team={"id": slack.team_id, "name": slack.team_name},
            enterprise=None,
            is_enterprise_install=False,
        )
        return token


class MockSlackAuthorizationServer(ProviderAuthorizationServer):
    def __init__(self, slack: MockSlack) -> None:
        super().__init__(slack)
        self.slack = slack
        self.register_token_generator("default", MockSlackTokenGenerator(slack))
        self.register_grant(MockSlackCodeGrant, [RequiredS256CodeChallenge(), RequireSomeScope()])

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        self.slack.store_install(token, request.client.get_client_id(), request.user)


class MockSlack(MockProvider):
    """State, knobs and counters of one MockSlack instance.

    Knobs (assign freely in tests):
      * ``team_id`` / ``team_name``: the workspace every install lands in.
      * ``token_endpoint_mode`` / ``api_mode``: ``"ok"`` (default), ``"junk"``,
        ``"500"`` or ``"hang"`` for ``/mockslack/oauth.v2.access`` /
        ``/mockslack/auth.test``; ``hang_seconds`` bounds a hang.
      * ``clock``: the time source for code expiry.

    Counters: ``token_requests`` (``oauth.v2.access`` calls; ``error`` is the
    Slack error string), ``issued_bot_tokens``, ``issued_user_tokens``,
    ``issued_access_tokens`` (both kinds), ``revoked_tokens``,
    ``auth_test_requests``.
    """

    api: SlackApi

    def __init__(self, base_url: str, client: ClientSpec, *, store: MockStore | None = None) -> None:
        self.base_url = base_url
        super().__init__(MockSlackClient.from_spec(client, grant_types=("authorization_code",)), store)
        self.team_id = DEFAULT_TEAM_ID
        self.team_name = DEFAULT_TEAM_NAME
        self.app_id = slack_id("A", "app:" + client.client_id)
        self.bot_id = slack_id("B", "bot:" + client.client_id)
        self.bot_user_id = slack_id("U", "bot-user:" + client.client_id)

        self.issued_bot_tokens: set[str] = set()
        self.issued_user_tokens: set[str] = set()
        self.auth_test_requests = 0

        # Durable (mock_providers.store): a restart keeps codes and installs' tokens.
        self.codes = DurableMap(self.mock_store, "mockslack/codes", RecordCodec(MockSlackCode, "code"))
        self.tokens: DurableMap[MockSlackToken] = DurableMap(
            self.mock_store, "mockslack/tokens", RecordCodec(MockSlackToken, "token")
        )

        self.server = MockSlackAuthorizationServer(self)
        #: Slack's Web API, stood in for under MockSlack's prefix (mockslack/api.py).
        self.api = SlackApi(lambda: self.team_id, lambda: self.clock())

    # -- knobs and test helpers ------------------------------------------------

    def account(self, login: str) -> MockSlackAccount | None:
        return MockSlackAccount.for_login(login)

    def revoke_grant(self, login: str) -> int:
        """As if ``login``'s installs were removed: their bot and user tokens stop working."""
        wanted = login.strip().lower()
        return self._revoke_where(lambda token: token.installer.lower() == wanted)

    def revoke_all_tokens(self) -> int:
        """As if the app were uninstalled everywhere."""
        return self._revoke_where(lambda token: True)

    def reset_counters(self) -> None:
        self.token_requests.clear()
        self.auth_test_requests = 0

    # -- storage ---------------------------------------------------------------

    def store_install(self, token: dict[str, Any], client_id: str, install: MockSlackInstall) -> None:
        """Record the tokens of one ``oauth.v2.access`` answer (one install)."""
        now = self.clock()
        install_id = secrets.token_hex(8)

        def add(value: str, kind: TokenKind, scope: str, user_id: str, user: str) -> None:
            self.tokens[value] = MockSlackToken(
                token=value,
                kind=kind,
                client_id=client_id,
                scope=scope,
                team_id=self.team_id,
                user_id=user_id,
                user=user,
                installer=install.account.login,
                install_id=install_id,
                issued_at=now,
            )
            (self.issued_bot_tokens if kind == "bot" else self.issued_user_tokens).add(value)
            self.issued_access_tokens.add(value)

        if "access_token" in token:
            add(token["access_token"], "bot", token["scope"], self.bot_user_id, BOT_NAME)
        authed_user = token["authed_user"]
        if "access_token" in authed_user:
            account = install.account
            add(authed_user["access_token"], "user", authed_user["scope"], account.id, account.login)

    def revoke(self, record: MockSlackToken) -> bool:
        """Revoke one token; ``False`` if it already was."""
        if record.revoked:
            return False
        record.revoked = True
        self.tokens[record.token] = record
        self.revoked_tokens.add(record.token)
        return True

    def _revoke_where(self, predicate: Callable[[MockSlackToken], bool]) -> int:
        return sum(self.revoke(token) for token in list(self.tokens.values()) if predicate(token))
