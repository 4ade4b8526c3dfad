"""A client that goes away before its request is read is not a server error.

A route that reads the body of a request whose client has disconnected (or whose body did not
arrive in time: service/http/server.py closes that connection) gets Starlette's `ClientDisconnect`.
Uncaught, uvicorn logs it as "Exception in ASGI application", at ERROR with a traceback: any
anonymous client could write as many of those as it liked, and an operator would look for a bug
where there is none. Nobody is left to answer, so the request ends with one INFO line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from starlette.requests import ClientDisconnect
from starlette.types import Scope

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def client_gone_is_not_an_error(scope: Scope) -> Iterator[None]:
    """Around one HTTP request: a `ClientDisconnect` from it ends it with an INFO line naming the
    method and path (never the query, which may carry a code or a state)."""
    try:
        yield
    except ClientDisconnect:
        logger.info("client went away before its request was read: %s %s", scope["method"], scope["path"])
