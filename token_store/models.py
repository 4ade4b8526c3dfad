"""Records the store keeps. Plain frozen dataclasses: no I/O, no crypto."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class UserRef:
    """The MCP user: `(iss, sub)` from a verified MCP access token (docs/threat-model.md, "The user
    is `(iss, sub)` from a verified MCP access token")."""

    iss: str
    sub: str


@dataclass(frozen=True)
class ConnectionKey:
    """Where one token set lives. Also the AEAD associated data of that token set."""

    user: UserRef
    provider: str
    account: str

    def associated_data(self) -> bytes:
        # Canonical JSON so no two distinct keys can serialise alike (no separator games).
        # mutant: store.connection_binding \
        #   '"conn", self.user.iss, self.user.sub, self.provider, self.account' -> '"conn"'
        return json.dumps(
            ["conn", self.user.iss, self.user.sub, self.provider, self.account], separators=(",", ":")
        ).encode()


@dataclass(frozen=True)
class TokenSet:
    """A provider's token response, kept only in encrypted form at rest."""

    access_token: str
    token_type: str = "Bearer"  # noqa: S105 - a token type name, not a secret
    refresh_token: str | None = None
    expires_at: float | None = None
    scopes: tuple[str, ...] = ()
    # The authorization server that issued the grant, for a provider whose server can change
    # while we run (a remote MCP server's); None for the others. Left out of the JSON when None,
    # so their sealed blobs read as before.
    issuer: str | None = None

    def to_json(self) -> bytes:
        fields = asdict(self)
        if fields["issuer"] is None:
            del fields["issuer"]
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> TokenSet:
        data = json.loads(raw)
        data["scopes"] = tuple(data.get("scopes") or ())
        return cls(**data)

    def __repr__(self) -> str:  # never print a token, even by accident in a traceback
        return (
            f"TokenSet(token_type={self.token_type!r}, expires_at={self.expires_at!r}, "
            f"scopes={self.scopes!r})"
        )


class ConnectionStatus(enum.StrEnum):
    """Health of a connection, shown to the user and in `list_connections`."""

    OK = "ok"
    NEEDS_REAUTHORIZATION = "needs_reauthorization"  # the provider refused the grant: connect again
    # Reserved: no code path stores these two yet, so `list_connections` never shows them
    # (docs/providers.md, "Health"). A refresh in flight is the refresh lock being held; a provider's
    # `invalid_grant` does not say whether the grant was revoked or expired (RFC 6749 §5.2).
    REFRESHING = "refreshing"
    REVOKED = "revoked"


@dataclass(frozen=True)
class Connection:
    """A user's connection to one provider account."""

    key: ConnectionKey
    tokens: TokenSet
    account_label: str  # human-readable account name (e.g. a login); not a secret
    connected_at: float
    updated_at: float  # also the version for compare-and-set replacement
    status: ConnectionStatus = ConnectionStatus.OK
    refreshed_at: float | None = None

    def describe(self) -> dict[str, Any]:
        """What may be shown to the user or the MCP client: no secrets."""
        return {
            "provider": self.key.provider,
            "account": self.key.account,
            "account_label": self.account_label,
            "scopes": list(self.tokens.scopes),
            "connected_at": self.connected_at,
            "updated_at": self.updated_at,
            "refreshed_at": self.refreshed_at,
            "expires_at": self.tokens.expires_at,
            "status": self.status.value,
        }


@dataclass(frozen=True)
class SealedConnection:
    """A connection as a store holds it: its token set still sealed. What `store copy-from` moves
    (token_store/store_copy.py): the sealed blob's associated data is the connection key, never
    where a backend keeps it, so it opens in any store under the same key ring, and the copy
    never opens it."""

    key: ConnectionKey
    blob: bytes
    account_label: str
    connected_at: float
    updated_at: float
    status: ConnectionStatus = ConnectionStatus.OK
    refreshed_at: float | None = None


@dataclass(frozen=True)
class Deletion:
    """A store deleted the connection at `key` at `deleted_at` (its clock). Every backend keeps one
    for each connection it deletes, `DELETIONS_KEPT` seconds, so that a copy between stores never
    brings back what was deleted (token_store/store_copy.py). Not secret: the key and a time."""

    key: ConnectionKey
    deleted_at: float

    def covers(self, connected_at: float) -> bool:
        """Was a connection made at `connected_at` deleted by this? One made later is a new grant."""
        return connected_at <= self.deleted_at


# How long a store remembers a deletion: the longest a migration between stores may take, from
# its first `store copy-from` to its last (token_store/store_copy.py, `COPY_WINDOW`).
DELETIONS_KEPT = 7 * 24 * 3600.0


class ElicitationStatus(enum.StrEnum):
    PENDING = "pending"  # created by a tool call, URL not yet opened
    OPENED = "opened"  # /connect passed the user check and sent the browser to the provider
    COMPLETE = "complete"  # /callback stored the token set
    FAILED = "failed"  # the provider answered an error or the exchange failed

    @property
    def is_live(self) -> bool:
        """Still in progress: counts against the per-user limit and may still complete."""
        return self in LIVE_STATUSES


# The statuses of an elicitation still in progress (the rest are final). Backends count these
# against `max_pending_per_user` (docs/threat-model.md, "per-user limit on pending elicitations");
# a 2026-07-28 retry waits only while its elicitation is live.
LIVE_STATUSES: frozenset[ElicitationStatus] = frozenset({ElicitationStatus.PENDING, ElicitationStatus.OPENED})


class Transition(enum.Enum):
    """The status machine of an elicitation: every change of status there is, as (old, new).

    The one statement of the rules. `ConnectFlow` (service/flow/connect.py) makes each one and
    says who; every backend's compare-and-set takes its statuses from here (`Store.open_elicitation`
    is `OPEN`, `Store.complete_elicitation` is `COMPLETE`) and `Store.transition_elicitation`
    refuses any other pair (`require_transition`). Creation (→ pending) is `create_elicitation`;
    expiry is not a status (an expired record reads as absent)."""

    OPEN = (ElicitationStatus.PENDING, ElicitationStatus.OPENED)
    DECLINE = (ElicitationStatus.PENDING, ElicitationStatus.FAILED)
    COMPLETE = (ElicitationStatus.OPENED, ElicitationStatus.COMPLETE)
    FAIL = (ElicitationStatus.OPENED, ElicitationStatus.FAILED)

    @property
    def old(self) -> ElicitationStatus:
        return self.value[0]

    @property
    def new(self) -> ElicitationStatus:
        return self.value[1]


_TRANSITION_PAIRS = frozenset(transition.value for transition in Transition)


def require_transition(old: ElicitationStatus, new: ElicitationStatus) -> None:
    """ValueError unless `old → new` is a `Transition`: a caller's bug, refused before anything is
    sent to the backend, so no store ever makes a change the status machine does not have (a
    failed or completed link opened again, a pending one completed without its state)."""
    # mutant: store.transition_table
    if (old, new) not in _TRANSITION_PAIRS:
        raise ValueError(f"{old.value} -> {new.value} is not a transition of an elicitation")


@dataclass(frozen=True)
class PendingElicitation:
    """A connect request bound to the user and MCP session that asked for it."""

    id: str
    user: UserRef
    client_id: str
    mcp_session_id: str | None  # None on the stateless 2026-07-28 revision
    provider: str
    scopes: tuple[str, ...]
    created_at: float
    expires_at: float
    status: ElicitationStatus = ElicitationStatus.PENDING
    # Why a FAILED flow failed (a FlowOutcome value: denied, provider_error, expired, ...). Set on
    # the record published to the completion bus, so the session that asked learns the reason;
    # the stored record keeps None (a retry that reads the store gives a generic message).
    failure: str | None = None
    # The MCP client's own name for itself (2025-11-25 `initialize` clientInfo.name), shown on the
    # confirmation page. Untrusted text from the client: short, and escaped where it is shown.
    # Records stored before this field existed load with None.
    client_name: str | None = None

    def to_json(self) -> str:
        data = asdict(self)
        data["status"] = self.status.value
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> PendingElicitation:
        data = json.loads(raw)
        data["user"] = UserRef(**data["user"])
        data["scopes"] = tuple(data["scopes"])
        data["status"] = ElicitationStatus(data["status"])
        return cls(**data)


@dataclass(frozen=True)
class OAuthState:
    """Server-side half of one provider authorization request (RFC 6749 §10.12, RFC 7636).

    Stored encrypted (it holds the PKCE verifier) under a hash of `state`.
    """

    state: str
    elicitation: PendingElicitation
    browser_binding: str  # hash of the browser session id that passed /connect
    code_verifier: str
    redirect_uri: str
    token_endpoint: str  # from configuration at /connect time, never from the callback request
    expected_issuer: str | None  # RFC 9207 issuer, when the provider advertises it
    created_at: float
    expires_at: float

    def to_json(self) -> bytes:
        data = asdict(self)
        data["elicitation"] = json.loads(self.elicitation.to_json())
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> OAuthState:
        data = json.loads(raw)
        data["elicitation"] = PendingElicitation.from_json(json.dumps(data["elicitation"]))
        data.pop("extra", None)  # an always-empty member older sealed states carry: they still open
        return cls(**data)

    def __repr__(self) -> str:
        return f"OAuthState(elicitation={self.elicitation.id!r}, expires_at={self.expires_at!r})"


@dataclass(frozen=True)
class CallbackOutcome:
    """How one provider callback ended, kept a short while under a hash of its OAuth state (whose
    own record the callback took): the same callback again (a reload, the router's retry after a
    replica failed) is answered with this instead of a second code exchange.

    Not secret: `request` is a digest of the request that ended the flow (its browser binding,
    provider path and parameters, code included), `outcome` a `FlowOutcome` value, and for a
    completed flow the account's label as the success page showed it."""

    request: str
    outcome: str
    provider: str
    account_label: str
    expires_at: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> CallbackOutcome:
        return cls(**json.loads(raw))


@dataclass(frozen=True)
class WebhookMessage:
    """One webhook waiting in the store's outbox until its receiver accepts it.

    `body` is the JSON payload exactly as signed and sent (never a token: service/observability/webhooks.py
    builds it from identifiers and status only); `id` is the Standard Webhooks `webhook-id`,
    the same on every attempt, so a receiver drops a repeat."""

    id: str
    type: str
    body: str
    created_at: float
    next_attempt_at: float
    attempts: int = 0


@dataclass(frozen=True)
class ClientRegistration:
    """This server's OAuth client at an authorization server, obtained by RFC 7591 dynamic
    registration: one per (issuer, redirect URI), shared by every replica, so a refresh token is
    always presented by the client that obtained it. Stored sealed (it may hold a client secret)."""

    issuer: str
    redirect_uri: str
    client_id: str
    client_secret: str | None
    token_endpoint_auth_method: str
    registered_at: float
    # RFC 7591 §3.2.1: when the secret expires (None, or 0 there: never).
    secret_expires_at: float | None = None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ClientRegistration:
        return cls(**json.loads(raw))

    def __repr__(self) -> str:  # never print the secret
        return f"ClientRegistration(issuer={self.issuer!r}, client_id={self.client_id!r})"
