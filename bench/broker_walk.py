"""The walk of one `ConnectionBroker.require` call through our modules, on each protocol revision.

For the main cases (no connection: the connect answer; one connected account: the connection;
several accounts and none remembered: "which account?"; a client without URL mode: the link in a
tool error) one call is traced with `sys.setprofile`, after an untraced call of the same case by
another user (so lazy imports and caches are not counted). A walk is the sequence of `service.*`
modules control passes through, one entry each time it passes to another module; two are printed:
- all our code: every `service.*` frame;
- frames given ctx: only the frames the request's `ctx` was handed to (an argument, a local, or
  an attribute of one such as `self.ctx`), that is where the request is read.
For each: the modules visited, how many times the walk comes back to a module it had left, and of
those how many times to service/mcp/broker.py. With `--walk`, the walks themselves.

A coroutine's suspension (an `await` reaching the event loop) and its resumption are not moves:
the call is where it was. A generator's `yield` (a context manager's, say) returns to its caller.

    .venv/bin/python -m bench.broker_walk [--walk]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dis
import inspect
import secrets
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any

from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp_types import (
    ClientCapabilities,
    ElicitationCapability,
    ElicitResult,
    FormElicitationCapability,
    UrlElicitationCapability,
)

from mock_providers.demo import build_demo
from service.flow.connect import ConnectFlow
from service.flow.lifecycle import TokenLifecycle
from service.mcp.broker import ConnectionBroker
from service.mcp.completion.hub import CompletionHub
from service.providers.outbound_http import OutboundHttp
from service.settings import Settings
from token_store import Connection, ConnectionKey, KeyRing, SQLiteStore, Store, TokenSet, UserRef

BROKER = "service.mcp.broker"
REVISIONS = ("2025-11-25", "2026-07-28")
FORM_AND_URL = ClientCapabilities(
    elicitation=ElicitationCapability(form=FormElicitationCapability(), url=UrlElicitationCapability())
)
FORM_ONLY = ClientCapabilities(elicitation=ElicitationCapability(form=FormElicitationCapability()))
_YIELD = dis.opmap["YIELD_VALUE"]
# A coroutine's (or async generator's) yield is a suspension to the event loop, not a return.
_SUSPENDS = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR


@dataclass(frozen=True)
class Case:
    name: str
    accounts: tuple[str, ...]  # the caller's MockHub accounts before the call
    capabilities: ClientCapabilities


CASES = (
    Case("no connection -> connect", (), FORM_AND_URL),
    Case("connected -> connection", ("1",), FORM_AND_URL),
    Case("several accounts -> which?", ("1", "2"), FORM_AND_URL),
    Case("no URL mode -> link", (), FORM_ONLY),
)


class Walk:
    """The `service.*` modules control passes through while installed (`sys.setprofile`); with
    `ctx`, only the frames that were handed `ctx` (an argument, a local, or an attribute of one)."""

    def __init__(self, ctx: object = None) -> None:
        self.modules: list[str] = []
        self._ctx = ctx
        self._started: set[int] = set()
        self._counted: set[int] = set()
        self._alive: list[FrameType] = []  # keeps started frames alive, so their ids stay unique

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            if id(frame) in self._started:
                if frame.f_code.co_flags & _SUSPENDS:
                    return  # a coroutine resumed: the call is where it was before it suspended
            else:
                self._started.add(id(frame))
                self._alive.append(frame)
                if _ours(frame) and (self._ctx is None or _holds(frame, self._ctx)):
                    self._counted.add(id(frame))
            if id(frame) in self._counted:
                self._at(_ours(frame))
        elif event == "return":
            suspended = frame.f_lasti >= 0 and frame.f_code.co_code[frame.f_lasti] == _YIELD
            if (suspended and frame.f_code.co_flags & _SUSPENDS) or id(frame) not in self._counted:
                return
            caller = frame.f_back
            while caller is not None and id(caller) not in self._counted:
                caller = caller.f_back
            self._at(_ours(caller) if caller is not None else None)

    def _at(self, module: str | None) -> None:
        if module is not None and (not self.modules or self.modules[-1] != module):
            self.modules.append(module)

    def returns(self, module: str | None = None) -> int:
        """Entries that come back to a module the walk had left (to `module` only, if named)."""
        seen: set[str] = set()
        count = 0
        for entry in self.modules:
            if entry in seen and module in (None, entry):
                count += 1
            seen.add(entry)
        return count


def _holds(frame: FrameType, value: object) -> bool:
    """Whether `value` is one of the frame's locals, or an attribute of one (`self.ctx`)."""
    return any(
        local is value or any(field is value for field in getattr(local, "__dict__", {}).values())
        for local in frame.f_locals.values()
    )


def _ours(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    return name if isinstance(name, str) and name.startswith("service.") else None


class FormAnswers:
    """The 2025-11-25 client's side of an in-band form elicitation: it picks the first account."""

    client_params = None

    async def elicit_form(self, message: str, requested_schema: Any, **kwargs: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"account": "account:1"})


async def _with_user(user: UserRef, call: Callable[[], Awaitable[object]]) -> object:
    token = AccessToken(token="t", client_id="c", scopes=[], subject=user.sub, claims={"iss": user.iss})
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        return await call()
    except Exception as exc:  # ConnectionNeeded, or whatever ends the call: its outcome is printed
        return getattr(exc, "outcome", exc)
    finally:
        auth_context_var.reset(reset)


async def _connect(store: Store, user: UserRef, accounts: tuple[str, ...]) -> None:
    for account in accounts:
        tokens = TokenSet(secrets.token_urlsafe(8), expires_at=time.time() + 3600, scopes=("read:user",))
        key = ConnectionKey(user, "mockhub", account)
        await store.put_connection(Connection(key, tokens, f"account-{account}", 1.0, 1.0))


async def trace(settings: Settings, data_dir: Path, revision: str, case: Case) -> tuple[Walk, Walk, object]:
    store = await SQLiteStore.open(data_dir / "store.sqlite3", KeyRing.parse(settings.encryption_keys))
    outbound = OutboundHttp(1.0)
    broker = ConnectionBroker(
        settings,
        store,
        CompletionHub(),
        TokenLifecycle(store, outbound, timeout_seconds=1),
        ConnectFlow(settings, store, outbound, clock=time.time),
        outbound.client,
    )
    # What the SDK's Context gives the broker on a first call (no requestState).
    ctx = SimpleNamespace(
        protocol_version=revision,
        client_capabilities=case.capabilities,
        session=FormAnswers(),
        request_id=1,
        request_state=None,
        input_responses=None,
        headers={},
    )
    walk, ctx_walk = Walk(), Walk(ctx)

    def both(frame: FrameType, event: str, arg: object) -> None:
        walk(frame, event, arg)
        ctx_walk(frame, event, arg)

    try:
        warm, alice = UserRef(settings.auth_issuer, "warm"), UserRef(settings.auth_issuer, "alice")
        for user in (warm, alice):
            await _connect(store, user, case.accounts)
        await _with_user(warm, lambda: broker.require(ctx, "mockhub"))  # type: ignore[arg-type]

        async def traced() -> object:
            sys.setprofile(both)
            try:
                return await broker.require(ctx, "mockhub")  # type: ignore[arg-type]
            finally:
                sys.setprofile(None)

        outcome = await _with_user(alice, traced)
    finally:
        await store.close()
        await outbound.client.aclose()
    return walk, ctx_walk, outcome


async def main(show_walk: bool) -> None:
    root = Path(tempfile.mkdtemp(prefix="broker-walk-"))
    print(f"{'':<68} {'all our code':^22}  {'frames given ctx':^22}")
    print(
        f"{'revision':<11} {'case':<28} {'answer':<27} "
        + f"{'modules':>7} {'returns':>7} {'broker':>6}  " * 2
    )
    for revision in REVISIONS:
        for number, case in enumerate(CASES):
            data_dir = root / f"{revision}-{number}"
            settings = build_demo("127.0.0.1", 9200, 9201, data_dir).settings
            walk, ctx_walk, outcome = await trace(settings, data_dir, revision, case)
            figures = "  ".join(
                f"{len(set(w.modules)):>7} {w.returns():>7} {w.returns(BROKER):>6}" for w in (walk, ctx_walk)
            )
            print(f"{revision:<11} {case.name:<28} {type(outcome).__name__:<27} {figures}")
            if show_walk:
                for w in (walk, ctx_walk):
                    print("    " + " > ".join(m.removeprefix("service.") for m in w.modules))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walk", action="store_true", help="print each walk")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(parser.parse_args().walk))
