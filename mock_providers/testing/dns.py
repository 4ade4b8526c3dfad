"""A DNS server answering A records for the names a test gives it, on loopback: the nameserver
the router's nginx resolves replicas with in tests/e2e/test_router.py and `Cluster`.

Written by hand (RFC 1035 §4.1, one question per UDP query, answers without compression beyond
the pointer to the question): the tests need A records for a few names, changed while nginx runs,
and the helpers under mock_providers/testing must run without a dev-only dependency.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterable

TYPE_A = 1
CLASS_IN = 1
NXDOMAIN = 3
FORMERR = 1
TTL_SECONDS = 1


class DnsServer:
    """`answers[name]` (lower case, no trailing dot) is the list of IPv4 addresses for `name`.
    A known name gets its A records (none for other types); an unknown one NXDOMAIN."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.answers: dict[str, list[str]] = {}
        self.queries: list[str] = []
        self._lock = threading.Lock()
        self._closing = False
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind((host, 0))
        self.address: str = f"{host}:{self._socket.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def set(self, name: str, addresses: Iterable[str]) -> None:
        with self._lock:
            self.answers[name.lower().rstrip(".")] = list(addresses)

    def remove(self, name: str) -> None:
        with self._lock:
            self.answers.pop(name.lower().rstrip("."), None)

    def close(self) -> None:
        # Wake the serving thread before the descriptor is closed and its number reused: a thread
        # still reading it would take the datagrams of the next server given that number.
        self._closing = True
        self._socket.sendto(b"", self._socket.getsockname())
        self._thread.join(5)
        self._socket.close()

    def _serve(self) -> None:
        while True:
            try:
                query, client = self._socket.recvfrom(512)
            except OSError:
                return
            if self._closing:
                return
            try:
                answer = self._answer(query)
            except (ValueError, struct.error):  # a malformed query: no answer, keep serving
                answer = None
            if answer is not None:
                try:
                    self._socket.sendto(answer, client)
                except OSError:
                    return

    def _answer(self, query: bytes) -> bytes | None:
        if len(query) < 12:
            return None
        query_id, flags, questions = struct.unpack("!HHH", query[:6])
        labels: list[str] = []
        offset = 12
        while offset < len(query) and query[offset]:
            length = query[offset]
            labels.append(query[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
            offset += 1 + length
        end = offset + 5  # the zero label, QTYPE, QCLASS
        if questions != 1 or end > len(query):
            return struct.pack("!HHHHHH", query_id, 0x8000 | FORMERR, 0, 0, 0, 0)
        qtype, qclass = struct.unpack("!HH", query[offset + 1 : end])
        name = ".".join(labels).lower()
        with self._lock:
            self.queries.append(name)
            addresses = self.answers.get(name)
        question = query[12:end]
        recursion = flags & 0x0100
        if addresses is None:
            header = struct.pack("!HHHHHH", query_id, 0x8080 | recursion | NXDOMAIN, 1, 0, 0, 0)
            return header + question
        records = b""
        if qtype == TYPE_A and qclass == CLASS_IN:
            for address in addresses:
                rdata = socket.inet_aton(address)
                records += struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL_SECONDS, len(rdata)) + rdata
        count = len(records) // 16
        header = struct.pack("!HHHHHH", query_id, 0x8080 | recursion, 1, count, 0, 0)
        return header + question + records
