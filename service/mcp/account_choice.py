"""Which account, when the caller has several at one provider and the tool call names none.

A call on someone's behalf must not pick an account for them silently. The broker asks with a
form-mode elicitation holding one single-select field: the caller's accounts at the provider,
listed by label, plus "connect another account". Nothing secret and no free text is asked
(2025-11-25/client-elicitation.mdx "Form Mode Security": "Servers MUST NOT request sensitive
information ... via form mode"); the answer is checked server-side against what was offered
(`require_offered_account`). The chosen account is remembered per user and provider
(`Connections.remember_default`), so the question comes once.

This module builds the question and reads the answer; the broker decides when to ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp_types import CallToolResult, ElicitRequestFormParams, ElicitResult, TextContent

from service.errors import NewAccountWanted, NoAccountChosen
from service.flow.security_checks import require_offered_account
from service.providers.catalogue import ProviderConfig
from token_store import Connection, ConnectionStatus

ACCOUNT_FIELD = "account"
# Option values carry a prefix so that no account id can collide with "connect another account".
ACCOUNT_OPTION_PREFIX = "account:"
NEW_ACCOUNT_OPTION = "new"
NEW_ACCOUNT_TITLE = "Connect another account"


@dataclass(frozen=True)
class AccountChoice:
    """The question for one user at one provider: the accounts offered, in a stable order."""

    provider: ProviderConfig
    accounts: tuple[Connection, ...]

    @classmethod
    def of(cls, provider: ProviderConfig, connections: Sequence[Connection]) -> AccountChoice:
        ours = sorted(
            (c for c in connections if c.key.provider == provider.name),
            key=lambda c: (c.account_label, c.key.account),
        )
        return cls(provider, tuple(ours))

    def request(self) -> ElicitRequestFormParams:
        """The form-mode elicitation: one required single-select string field (the titled
        `oneOf` enum of 2025-11-25/client-elicitation.mdx "Requested Schema")."""
        options = [{"const": _option(c), "title": _title(c, self.accounts)} for c in self.accounts]
        options.append({"const": NEW_ACCOUNT_OPTION, "title": NEW_ACCOUNT_TITLE})
        name = self.provider.display_name
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                ACCOUNT_FIELD: {
                    "type": "string",
                    "title": f"{name} account",
                    "description": f"The {name} account this tool uses (remembered for next time)",
                    "oneOf": options,
                }
            },
            "required": [ACCOUNT_FIELD],
        }
        message = (
            f"You have several {name} accounts connected. Which one should this tool use? "
            "Your choice is remembered for next time."
        )
        return ElicitRequestFormParams(message=message, requested_schema=schema)

    def pick(self, answer: ElicitResult | None) -> Connection:
        """The account the user chose. Raises `NoAccountChosen` on decline or cancel,
        `NewAccountWanted` for "connect another account", and `InvalidAccountChoice` (from the
        check) for anything that is not one of the options offered."""
        if answer is None or answer.action != "accept":
            raise NoAccountChosen()
        content = answer.content if isinstance(answer.content, dict) else {}
        offered = {_option(c): c for c in self.accounts}
        value = require_offered_account(content.get(ACCOUNT_FIELD), [*offered, NEW_ACCOUNT_OPTION])
        if value == NEW_ACCOUNT_OPTION:
            raise NewAccountWanted()
        return offered[value]

    def declined_text(self) -> str:
        return (
            f"No {self.provider.display_name} account was chosen, so nothing was done. Call the tool "
            "again and pick one, or name it with the `account` argument."
        )


def used_account_notice(connection: Connection, provider: ProviderConfig) -> str:
    """What a client that cannot show the question is told: which account was used and how to
    pick another (a tool result's extra text item; its structured content is left as it is)."""
    return (
        f"Used the {provider.display_name} account {connection.account_label!r} (the most recently "
        f"used of several). To use another, call the tool again with account=<label or id>."
    )


def with_notice(result: Any, notice: str | None) -> Any:
    """A tool's dict result with `notice` appended as a second text item; `structuredContent`
    stays the dict the tool returned. Other results pass unchanged."""
    if notice is None or not isinstance(result, dict):
        return result
    # The text the SDK would have written for the dict (MCPServer's own conversion), then ours.
    text = pydantic_core.to_json(result, fallback=str, indent=2).decode()
    return CallToolResult(
        content=[TextContent(type="text", text=text), TextContent(type="text", text=notice)],
        structured_content=result,
    )


def _option(connection: Connection) -> str:
    return ACCOUNT_OPTION_PREFIX + connection.key.account


def _title(connection: Connection, accounts: Sequence[Connection]) -> str:
    title = connection.account_label
    if sum(1 for c in accounts if c.account_label == title) > 1:
        title = f"{title} ({connection.key.account})"  # two accounts with one label: tell them apart
    if connection.status in (ConnectionStatus.NEEDS_REAUTHORIZATION, ConnectionStatus.REVOKED):
        title += " (needs connecting again)"
    return title
