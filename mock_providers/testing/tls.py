"""One TLS context per process for the kit's HTTP clients.

httpx builds a new `ssl.SSLContext` for every client it creates, and loading the CA bundle costs
~20 ms of CPU each time. The kit opens a client per MCP session and per scripted browser, so a
flow paid that twice: more than the whole server side of the flow. An `SSLContext` holds no
per-connection state, so sharing one is safe; certificate checking stays on (the stack is
loopback http, but an integrator may point the kit at https).
"""

from __future__ import annotations

import ssl
from functools import cache

import httpx


@cache  # a memo, not state: the context never changes once built
def client_tls() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's bundle, `SSL_CERT_FILE`/`SSL_CERT_DIR` honoured)."""
    return httpx.create_ssl_context()
