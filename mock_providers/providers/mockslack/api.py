"""MockSlack's stand-in for Slack's Web API, under MockSlack's prefix (the ``slack`` preset's API
base): ``conversations.list`` (paged by ``cursor`` / ``limit`` with
``response_metadata.next_cursor``) and ``chat.postMessage``, answering as Slack does: HTTP 200
with ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}`` (``missing_scope`` with ``needed``
and ``provided``), and 429 with ``Retry-After`` and ``ratelimited`` when throttled. Arguments
come in the query, a form body or a JSON body.

The world: the workspace has ``channel_count`` public channels (``general``, ``random``,
``project-003``, …); posted messages are kept in ``messages``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mock_providers.api.exchange import ApiAnswer, ApiRequest, Handler
from mock_providers.api.pagination import continuation, continued_from, int_param
from mock_providers.api.stand_in import StandInApi, retry_after_header
from mock_providers.providers.mockslack.formats import slack_id

CHANNEL_CREATED = 1_449_252_889  # when the mock workspace's channels were made (Unix time)


@dataclass(frozen=True)
class PostedMessage:
    """A message ``chat.postMessage`` accepted."""

    channel: str
    user: str
    text: str
    ts: str


def channel_name(number: int) -> str:
    return {1: "general", 2: "random"}.get(number, f"project-{number:03d}")


def channel_json(team_id: str, number: int) -> dict[str, Any]:
    """A public channel as ``conversations.list`` lists it."""
    name = channel_name(number)
    created = CHANNEL_CREATED + number * 86_400
    return {
        "id": slack_id("C", f"channel:{team_id}:{name}"),
        "name": name,
        "is_channel": True,
        "is_group": False,
        "is_im": False,
        "is_mpim": False,
        "is_private": False,
        "created": created,
        "is_archived": False,
        "is_general": number == 1,
        "unlinked": 0,
        "name_normalized": name,
        "is_shared": False,
        "is_org_shared": False,
        "is_pending_ext_shared": False,
        "pending_shared": [],
        "context_team_id": team_id,
        "updated": created * 1000,
        "parent_conversation": None,
        "creator": slack_id("U", "user:admin"),
        "is_ext_shared": False,
        "shared_team_ids": [team_id],
        "pending_connected_team_ids": [],
        "is_member": True,
        "topic": {"value": "", "creator": "", "last_set": 0},
        "purpose": {"value": f"All things {name}", "creator": "", "last_set": 0},
        "previous_names": [],
        "num_members": 3 + number % 20,
    }


def slack_answer(**fields: Any) -> ApiAnswer:
    """A Web API answer: HTTP 200, ``ok`` true unless an ``error`` is given."""
    return ApiAnswer({"ok": "error" not in fields, **fields}, 200, {"Cache-Control": "no-store"})


class SlackApi(StandInApi):
    """Slack's Web API as MockSlack serves it (``slack.api``)."""

    provider = "Slack"

    def __init__(self, team_id: Callable[[], str], clock: Callable[[], float]) -> None:
        self.team_id = team_id
        self.clock = clock
        #: How many public channels the workspace has.
        self.channel_count = 5
        self.messages: list[PostedMessage] = []
        self._sequence = 0
        self._messages_lock = threading.Lock()
        super().__init__()

    def channels(self) -> list[dict[str, Any]]:
        team_id = self.team_id()
        return [channel_json(team_id, n) for n in range(1, self.channel_count + 1)]

    def builtin_routes(self) -> Iterable[tuple[str, str, Handler]]:
        return (
            ("GET", "/conversations.list", self.conversations_list),
            ("POST", "/conversations.list", self.conversations_list),
            ("POST", "/chat.postMessage", self.post_message),
        )

    def conversations_list(self, request: ApiRequest) -> ApiAnswer:
        """``conversations.list``: public channels, 100 a page by default, at most 1000."""
        args = arguments(request)
        if missing := self._missing_scope(request, "channels:read"):
            return missing
        channels = self.channels()
        limit = int_param(args, "limit", 100, 1, 1000)
        start = 0
        if args.get("cursor"):
            offset = continued_from("channels", args["cursor"])
            if offset is None:
                return slack_answer(error="invalid_cursor")
            start = offset
        next_cursor = continuation("channels", start + limit) if start + limit < len(channels) else ""
        return slack_answer(
            channels=channels[start : start + limit], response_metadata={"next_cursor": next_cursor}
        )

    def post_message(self, request: ApiRequest) -> ApiAnswer:
        """``chat.postMessage``: ``channel`` (an id or a name) and ``text``."""
        args = arguments(request)
        if missing := self._missing_scope(request, "chat:write"):
            return missing
        wanted = str(args.get("channel", "")).removeprefix("#")
        found = [c for c in self.channels() if wanted in (c["id"], c["name"])]
        if not found:
            return slack_answer(error="channel_not_found")
        text = args.get("text")
        if not isinstance(text, str) or not text:
            return slack_answer(error="no_text")
        with self._messages_lock:
            self._sequence += 1
            ts = f"{int(self.clock())}.{self._sequence:06d}"
            posted = PostedMessage(found[0]["id"], request.owner.id, text, ts)
            self.messages.append(posted)
        message = {"type": "message", "user": posted.user, "text": text, "ts": ts, "team": self.team_id()}
        return slack_answer(channel=posted.channel, ts=ts, message=message)

    def _missing_scope(self, request: ApiRequest, needed: str) -> ApiAnswer | None:
        if needed in request.owner.scopes:
            return None
        return slack_answer(error="missing_scope", needed=needed, provided=",".join(request.owner.scopes))

    def too_many_requests(self, retry_after: int | None) -> ApiAnswer:
        return ApiAnswer({"ok": False, "error": "ratelimited"}, 429, retry_after_header(retry_after))

    def not_found(self, request: ApiRequest) -> ApiAnswer:
        method = request.path.lstrip("/")
        return ApiAnswer({"ok": False, "error": "unknown_method", "req_method": method}, 404)

    def unauthorized(self, reason: str) -> ApiAnswer:
        return slack_answer(error=reason)


def arguments(request: ApiRequest) -> dict[str, Any]:
    """A Web API method's arguments: the query, then a form or JSON body over it."""
    args: dict[str, Any] = dict(request.query)
    args.update(request.form)
    body = request.json
    if isinstance(body, dict):
        args.update(body)
    return args
