"""A remote MCP server that moves to another authorization server while we serve, followed.

The MCP spec (2026-07-28 basic/authorization, SEP-2352): when a protected resource's metadata
names another authorization server than the one a client registered with, the client discovers
it and registers there, and never presents the old server's credentials to the new one. A
downstream tells us by answering 401 while its metadata lists another server.

`AuthorizationServerMoves.follow` does this for the gateway, once for all the calls that see such
a 401 together (one check in flight per provider; its outcome reused for `RECHECK_SECONDS`):

1. the protected-resource metadata is read again (`authorization_server_moved`), under the
   start-up rules (the challenge's document on the downstream's own origin, for this resource,
   at public addresses);
2. when the provider's authorization server is no longer listed, the provider is resolved again
   from the operator's entry (`resolve_downstream`: every start-up rule, and a new registration
   by Client ID Metadata Document or RFC 7591 at the new server), and the result replaces the
   entry in the providers every part reads by name (the connect flow, refresh, revocation, the
   broker, the gateway);
3. grants of the old server are then refused where they are used
   (`service/providers/oauth.py: require_grant_of_current_issuer`): each user is asked to connect
   again through the normal connect answer, and a flow begun at the old server is not finished
   (`require_flow_at_current_issuer`).

An operator who pinned `issuer` pinned it: a downstream whose metadata no longer lists that
server is not followed (the start-up rule, `choose_authorization_server`), and its calls fail with
an error that names the provider until the operator changes the configuration. So is one with a
client the operator registered beforehand (`require_no_client_from_another_server`), and one
whose new server breaks any other start-up rule. Each replica follows on its own, on its own 401.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass

import anyio

from service.errors import ProviderApiError
from service.providers.catalogue import ProviderConfig, ProviderError
from service.providers.protected_resource import Challenge

logger = logging.getLogger(__name__)

# How long one check's outcome answers the 401s that follow it: a downstream refusing every
# user's token at once costs one metadata read, not one per call.
RECHECK_SECONDS = 10.0

Moved = Callable[[ProviderConfig, Challenge], Awaitable[bool]]
Resolve = Callable[[ProviderConfig], Awaitable[ProviderConfig]]
# Told (provider, outcome) once per move seen: "followed", or "refused" when the rules kept us
# from following (the operator's metric; the log line says why).
Counted = Callable[[str, str], None]


@dataclass(frozen=True)
class _Checked:
    issuer: str | None  # the authorization server the check was made for
    at: float
    refused: str | None  # why a move was not followed; None: not moved


def require_no_client_from_another_server(provider: ProviderConfig) -> None:
    """A client the operator registered beforehand (`client_id`) was registered at the
    authorization server the provider had: it is not presented to another. The MCP spec
    (2026-07-28 basic/authorization, SEP-2352): clients MUST NOT assume credentials valid at one
    authorization server are accepted by another. Such a provider follows no move: the operator
    registers at the new server and changes the configuration."""
    configured = provider.configured or provider
    # mutant: gateway.no_client_from_another_server
    if configured.client_id:
        raise ProviderError(
            f"providers.{provider.name}.client_id: registered at {provider.issuer}, not at the "
            "authorization server the downstream names now"
        )


class AuthorizationServerMoves:
    def __init__(
        self,
        providers: MutableMapping[str, ProviderConfig],
        moved: Moved,
        resolve: Resolve,
        clock: Callable[[], float] = anyio.current_time,
        counted: Counted | None = None,
    ) -> None:
        self._providers = providers
        self._moved = moved
        self._resolve = resolve
        self._clock = clock
        self._counted = counted or (lambda provider, outcome: None)
        self._locks: dict[str, anyio.Lock] = {}  # one per remote MCP server: a small, fixed set
        self._checked: dict[str, _Checked] = {}

    def current(self, provider: ProviderConfig) -> ProviderConfig:
        """The provider's entry as it is now (resolved again if it moved)."""
        return self._providers.get(provider.name, provider)

    async def follow(self, provider: ProviderConfig, challenge: Challenge) -> ProviderConfig | None:
        """After `provider`'s downstream answered 401 with `challenge`: its new entry when it
        moved to another authorization server (in place already), None when it did not.
        `ProviderApiError` when it moved where the rules do not let us follow."""
        async with self._locks.setdefault(provider.name, anyio.Lock()):
            current = self.current(provider)
            if current.issuer != provider.issuer:
                return current  # followed by a call that held the lock before this one
            checked = self._checked.get(provider.name)
            if checked is None or checked.issuer != current.issuer or self._expired(checked):
                checked = await self._check(current, challenge)
                self._checked[provider.name] = checked
            if checked.refused is not None:
                raise ProviderApiError(
                    f"{current.display_name} moved to another authorization server, which this "
                    "server does not accept; its administrator has been told",
                    provider=current.name,
                )
            return None if self.current(provider) is current else self.current(provider)

    def _expired(self, checked: _Checked) -> bool:
        return self._clock() - checked.at >= RECHECK_SECONDS

    async def _check(self, current: ProviderConfig, challenge: Challenge) -> _Checked:
        try:
            moved = await self._moved(current, challenge)
        except ProviderError as exc:
            # The metadata cannot be read now: not a move, the 401 is handled as a refused token.
            logger.warning("gateway: reading %s's metadata again failed: %s", current.name, exc)
            return _Checked(current.issuer, self._clock(), None)
        if not moved:
            return _Checked(current.issuer, self._clock(), None)
        try:
            require_no_client_from_another_server(current)
            resolved = await self._resolve(current)
        except ProviderError as exc:
            logger.error(
                "gateway: %s names another authorization server than %s; not followed: %s",
                current.name,
                current.issuer,
                exc,
            )
            self._counted(current.name, "refused")
            return _Checked(current.issuer, self._clock(), str(exc))
        self._providers[current.name] = resolved
        self._counted(current.name, "followed")
        logger.warning(
            "gateway: %s moved from authorization server %s to %s; its users connect again",
            current.name,
            current.issuer,
            resolved.issuer,
        )
        return _Checked(current.issuer, self._clock(), None)
