"""Moving a deployment to another store (`mcp-url-connect store copy-from`): a copy that never
undoes a deletion.

The operator copies the old store into the new one, moves the replicas over, and copies again
(docs/redis.md, "Moving to another store"). Between the two copies both stores change: the new one
serves users, and a replica still on the old one may too. A copy that only adds what the target
lacks would bring back every connection deleted on the target meanwhile (a user's disconnect, an
operator's `connections revoke`), and would never carry over a disconnect made on the old store:
the revoked token set would open again, and at a provider without a revocation endpoint the grant
would be live. So every store remembers each connection it deletes (`Deletion`, kept
`DELETIONS_KEPT`), and a copy, key by key, each step atomic on the target:

1. carries every deletion the source remembers: the target deletes its connection at that key if
   it was made at or before the deletion (`Deletion.covers`), and remembers the deletion too;
2. copies every connection of the source, sealed as it is, unless the target remembers deleting
   it at or after it was made (a grant made later is a new one) or holds one at least as new
   (`updated_at`: a refresh or a reconnect on the target stays);
3. copies each remembered default account the target has none for, and each dynamic client
   registration the target has none for (its refresh tokens are bound to that client).

The rules are written once, here (`copy_unless_deleted`, `carry_deletion`,
`require_open_copy_window`), not in each backend's SQL and Lua: a backend only reads the key's
connection and deletion and writes what the rule returns, in one transaction or compare-and-set
(`CopyTarget.change_connection`). The source is only read, and nothing is opened: a sealed token
set's associated data is its connection key, so it opens in any store.

The window: the first copy into a store opens it, and a copy more than `COPY_WINDOW` later is
refused (`CopyWindowClosed`): by then the deletions made early in the window are forgotten, and a
copy from a store left behind would bring them back. `new_window` opens a new one, for a store
that served until now.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from token_store.base import Store, StoreError
from token_store.models import (
    DELETIONS_KEPT,
    ClientRegistration,
    ConnectionKey,
    Deletion,
    SealedConnection,
    UserRef,
)

# The longest a migration may take, from its first copy to its last: what the stores remember
# deletions for, so that every deletion made during the window is still known to the last copy.
COPY_WINDOW = DELETIONS_KEPT


class CopyWindowClosed(StoreError):
    """The target's copy window closed: a copy now could bring back a deletion it forgot."""


class Outcome(enum.Enum):
    COPIED = "copied"
    KEPT = "kept"  # the target's connection is at least as new
    DELETED = "deleted"  # the target deleted this grant: not brought back
    REMOVED = "removed"  # a deletion carried over removed the target's copy
    NOTHING = "nothing"


@dataclass(frozen=True)
class Change:
    """What a copy writes at one key of the target: `put` stores a connection, `remove` deletes the
    target's, `deletion` is the deletion to remember there (None: leave what is remembered)."""

    outcome: Outcome
    put: SealedConnection | None = None
    remove: bool = False
    deletion: Deletion | None = None


# Given the target's connection and unexpired deletion at one key, what to write there.
Decision = Callable[[SealedConnection | None, Deletion | None], Change]


def copy_unless_deleted(incoming: SealedConnection) -> Decision:
    """Step 2: the source's connection `incoming` goes in unless the target deleted that grant
    (made at or before the deletion, however refreshed since: RFC 7009 §2.1, a revoked token
    "cannot be used again after the revocation") or holds one at least as new."""

    def decide(held: SealedConnection | None, deleted: Deletion | None) -> Change:
        # mutant: store_copy.never_undo_a_deletion
        if deleted is not None and deleted.covers(incoming.connected_at):
            return Change(Outcome.DELETED)
        if held is not None and held.updated_at >= incoming.updated_at:
            return Change(Outcome.KEPT)
        return Change(Outcome.COPIED, put=incoming)

    return decide


def carry_deletion(deletion: Deletion) -> Decision:
    """Step 1: the source's `deletion` removes the target's connection when it is the deleted
    grant or a copy of it (made at or before the deletion: RFC 7009 §2.1, as `copy_unless_deleted`),
    and is remembered there."""

    def decide(held: SealedConnection | None, deleted: Deletion | None) -> Change:
        # mutant: store_copy.carry_deletions \
        #   "held is not None and deletion.covers(held.connected_at)" -> "False"
        remove = held is not None and deletion.covers(held.connected_at)
        newer = deleted is None or deleted.deleted_at < deletion.deleted_at
        return Change(
            Outcome.REMOVED if remove else Outcome.NOTHING,
            remove=remove,
            deletion=deletion if newer else None,
        )

    return decide


def require_open_copy_window(opened_at: float, now: float) -> None:
    """`CopyWindowClosed` when the target's copy window, opened at `opened_at` by the first copy
    into it, is older than `COPY_WINDOW`: the deletions made early in it may be forgotten by now,
    and a copy could bring back a revoked grant (RFC 7009 §2.1: a revoked token "cannot be used
    again after the revocation")."""
    # mutant: store_copy.window
    if now > opened_at + COPY_WINDOW:
        raise CopyWindowClosed(
            "the copy window of the target store closed: it opened with the first copy-from "
            f"{(now - opened_at) / 86400:.1f} days ago, and deletions are remembered "
            f"{COPY_WINDOW / 86400:.0f} days; a copy now could bring back deleted connections "
            "(docs/redis.md, 'Moving to another store')"
        )


@runtime_checkable
class CopySource(Protocol):
    """What a copy reads from the old store (every backend has it)."""

    def sealed_connections(self) -> AsyncIterator[SealedConnection]:
        """Every stored connection, its token set sealed, in no particular order."""
        ...

    def deletions(self) -> AsyncIterator[Deletion]:
        """Every deletion remembered and unexpired."""
        ...

    def default_accounts(self) -> AsyncIterator[tuple[UserRef, str, str]]:
        """Every remembered (user, provider, account) choice."""
        ...

    def client_registrations(self) -> AsyncIterator[ClientRegistration]:
        """Every dynamic client registration that opens (a refresh token is bound to its client)."""
        ...


@runtime_checkable
class CopyTarget(Protocol):
    """What a copy writes into the new store (every backend has it)."""

    async def change_connection(self, key: ConnectionKey, decide: Decision) -> Change:
        """In one atomic step: read the connection and the unexpired deletion at `key`, and write
        what `decide` returns for them; return that."""
        ...

    async def copy_default_account(self, user: UserRef, provider: str, account: str) -> None:
        """Remember `account` as the user's default at `provider` unless a default is set."""
        ...

    async def open_copy_window(self, now: float, *, new: bool) -> float:
        """When the first copy into this store began; `now`, recorded, when none has (or `new`)."""
        ...

    async def add_client_registration(self, registration: ClientRegistration) -> ClientRegistration:
        """Store `registration` unless one is stored for its (issuer, redirect URI)."""
        ...


@dataclass
class CopyReport:
    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    deletions: int = 0  # deletions the source remembers, carried over
    client_registrations: int = 0  # dynamic registrations offered to the target
    window_opened_at: float = 0.0

    def summary(self) -> str:
        c = self.counts
        return (
            f"copied {c[Outcome.COPIED]} connection(s); kept {c[Outcome.KEPT]} the target holds as new; "
            f"left out {c[Outcome.DELETED]} deleted on the target; carried {self.deletions} deletion(s), "
            f"which removed {c[Outcome.REMOVED]} connection(s); {self.client_registrations} client "
            "registration(s)"
        )


async def copy_store(
    source: CopySource, target: CopyTarget, *, now: float, new_window: bool = False
) -> CopyReport:
    """Copy `source` into `target` as the module docstring says; `now` is the target's clock."""
    report = CopyReport()
    report.window_opened_at = await target.open_copy_window(now, new=new_window)
    require_open_copy_window(report.window_opened_at, now)
    async for deletion in source.deletions():
        report.deletions += 1
        change = await target.change_connection(deletion.key, carry_deletion(deletion))
        report.counts[change.outcome] += 1
    async for connection in source.sealed_connections():
        change = await target.change_connection(connection.key, copy_unless_deleted(connection))
        report.counts[change.outcome] += 1
    async for user, provider, account in source.default_accounts():
        await target.copy_default_account(user, provider, account)
    async for registration in source.client_registrations():
        # The target's own registration, if it made one already, is kept (the first stored wins).
        await target.add_client_registration(registration)
        report.client_registrations += 1
    return report


def copy_endpoints(source: Store, target: Store) -> tuple[CopySource, CopyTarget]:
    """The two stores as a copy uses them; ValueError for a store that cannot take part."""
    if not isinstance(source, CopySource) or not isinstance(target, CopyTarget):
        raise ValueError("store copy-from needs SQLite, Redis or PostgreSQL stores")
    return source, target
