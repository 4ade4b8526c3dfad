"""A user's connections as tools and the connections page see them: found by account id or label,
and the default account at a provider (the one a call naming no account uses when the user has
several there; docs/providers.md, "Several accounts at one provider").

The broker and the connections page both read and remember the default here, and only here.
"""

from __future__ import annotations

from collections.abc import Iterable

from service.errors import InvalidRequest
from token_store import Connection, Store, UserRef


class Connections:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def of_user(self, user: UserRef, provider: str | None = None) -> list[Connection]:
        """The user's connections, at `provider` only when named."""
        return await self._store.list_connections(user, provider)

    async def newest(self, user: UserRef, provider: str) -> Connection | None:
        """The user's most recently updated connection at `provider`."""
        return await self._store.get_connection(user, provider)

    async def named(self, user: UserRef, provider: str, account: str) -> Connection | None:
        """The account a tool named, by the provider's id or else by its label (e.g. a login;
        the most recently updated of several with that label)."""
        store = self._store
        found = await store.get_connection(user, provider, account)
        if found is None:
            matches = [c for c in await store.list_connections(user, provider) if c.account_label == account]
            found = max(matches, key=lambda c: c.updated_at, default=None)
        return found

    async def default_account(self, user: UserRef, provider: str) -> str | None:
        return await self._store.get_default_account(user, provider)

    async def default_accounts(self, user: UserRef, providers: Iterable[str]) -> dict[str, str | None]:
        return {p: await self.default_account(user, p) for p in sorted(set(providers))}

    async def remember_default(self, user: UserRef, provider: str, chosen: Connection | None) -> None:
        """Remember `chosen` as the user's default account at `provider`; None forgets it, so the
        next call naming no account asks again."""
        await self._store.set_default_account(user, provider, chosen.key.account if chosen else None)

    async def own_account(self, user: UserRef, provider: str, account: str) -> Connection:
        """The account a form names, only if the user holds it there: a form cannot name another
        user's account."""
        store = self._store
        own = await store.get_connection(user, provider, account)
        # mutant: connections.default_own_account
        if own is None:
            raise InvalidRequest("That account is not connected.")
        return own
