"""Log lines an operator can join: request id, replica, flow id and a pseudonymous user key.

`configure_logging` installs one stderr handler on the root logger with two filters, in order:
`RedactingFilter` (service/observability/redaction.py: no secret survives) and `LogContextFilter` (adds the
fields below from the current context). `MCPUC_LOG_FORMAT=json` writes one JSON object a line;
`text` (the default, for the demo) appends the same fields to a readable line, with every
control character escaped (`escape_control_characters`), so a record is exactly one line.

The flow id and the user key are keyed hashes (`Pseudonyms`): a reader of the logs can join every
line of Alice's flow, from the tool call that created it to the callback that failed, without the
logs holding the elicitation id (a capability: whoever has it can open the link) or her `sub`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Generic, TypeVar

from service.observability.redaction import RedactingFilter
from token_store import UserRef

# Per-request values travel in context variables, which asyncio copies into each task: this is
# state of the current request, not of the module.
_request_id: ContextVar[str | None] = ContextVar("mcpuc_request_id", default=None)
_flow: ContextVar[FlowFields | None] = ContextVar("mcpuc_flow", default=None)

CONTEXT_FIELDS = ("request_id", "replica", "flow_id", "user_key")
T = TypeVar("T")


@dataclass(frozen=True)
class FlowFields:
    flow_id: str
    user_key: str | None = None


class Pseudonyms:
    """Keyed, truncated hashes for log fields. The key is derived from a secret every replica
    shares, so the same flow has the same id on every replica; without the key nobody can test a
    guessed `sub` or elicitation id against the logs."""

    def __init__(self, secret: str) -> None:
        self._key = hmac.new(secret.encode(), b"mcp-url-connect log pseudonyms v1", hashlib.sha256).digest()

    def _hash(self, label: bytes, value: str) -> str:
        return hmac.new(self._key, label + b"\0" + value.encode(), hashlib.sha256).hexdigest()[:16]

    def flow_id(self, elicitation_id: str) -> str:
        # mutant: logs.flow_pseudonym
        return "f-" + self._hash(b"flow", elicitation_id)

    def user_key(self, user: UserRef) -> str:
        return "u-" + self._hash(b"user", f"{user.iss}\0{user.sub}")


def current_request_id() -> str | None:
    return _request_id.get()


class _Set(Generic[T]):
    """`variable` holds `value` inside the block. A class rather than a generator: it runs on
    every request, and a generator-based context manager costs a generator and two resumptions."""

    __slots__ = ("_token", "_value", "_variable")
    _token: Token[T]

    def __init__(self, variable: ContextVar[T], value: T) -> None:
        self._variable = variable
        self._value = value

    def __enter__(self) -> None:
        self._token = self._variable.set(self._value)

    def __exit__(self, *exc_info: object) -> None:
        self._variable.reset(self._token)


def request_context(request_id: str) -> AbstractContextManager[None]:
    """Every log line inside the block carries this request id."""
    return _Set(_request_id, request_id)


def flow_context(flow_id: str, user_key: str | None = None) -> AbstractContextManager[None]:
    """Every log line inside the block carries this flow's id (and the user key when known)."""
    return _Set(_flow, FlowFields(flow_id, user_key))


class LogContextFilter(logging.Filter):
    """Adds `request_id`, `replica`, `flow_id` and `user_key` to every record (None when unknown)."""

    def __init__(self, replica: str = "") -> None:
        super().__init__()
        self._replica = replica or None

    def filter(self, record: logging.LogRecord) -> bool:
        flow = _flow.get()
        record.request_id = _request_id.get()
        record.replica = self._replica
        record.flow_id = flow.flow_id if flow else None
        record.user_key = flow.user_key if flow else None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ms), level, logger, message and the context fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_text:  # already rendered and redacted by RedactingFilter
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


# C0 controls, DEL, C1 controls and the Unicode line and paragraph separators: whatever a
# terminal or a log viewer may take as the end of a line or as a command.
_CONTROLS = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029)
} | {ord("\r"): "\\r", ord("\n"): "\\n", ord("\t"): "\\t"}


def escape_control_characters(text: str) -> str:
    """`text` with CR, LF and every other control character written as a visible escape, for a
    line of the text log or of the CLI's output: an OAuth `error` from a callback or a token
    endpoint, an account label or any other value from outside cannot end the line and forge
    records or rows after it (CWE-117; OWASP Logging Cheat Sheet, "Event collection": sanitise CR,
    LF and delimiter characters), nor start a terminal escape sequence (ECMA-48 §5.3: every
    sequence starts with ESC or a C1 control, such as CSI or OSC: an erased row, or OSC 52 writing
    the clipboard; CWE-150)."""
    # mutant: logs.control_characters_escaped
    return text.translate(_CONTROLS)


class TextFormatter(logging.Formatter):
    """One line a record: the message and the context fields escaped (`escape_control_characters`); a
    traceback follows on lines of its own, each indented, so none can pass for a record."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = logging.makeLogRecord(record.__dict__)  # the record itself goes on to other handlers
        line.msg, line.args = escape_control_characters(record.getMessage()), None
        trace = record.exc_text or (self.formatException(record.exc_info) if record.exc_info else "")
        if record.stack_info:
            trace = f"{trace}\n{record.stack_info}" if trace else record.stack_info
        line.exc_info, line.exc_text, line.stack_info = None, None, None
        text = super().format(line)
        fields = " ".join(
            f"{name}={escape_control_characters(str(value))}"
            for name in CONTEXT_FIELDS
            if (value := getattr(record, name, None)) is not None
        )
        text = f"{text} [{fields}]" if fields else text
        if trace:
            text += "".join(f"\n    {escape_control_characters(part)}" for part in trace.split("\n"))
        return text


def configure_logging(level: str = "INFO", fmt: str = "text", replica: str = "") -> None:
    """Root logging to stderr, redacted and with context fields (idempotent: a second call only
    changes the level)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for existing in list(root.handlers):
        if not any(isinstance(f, RedactingFilter) for f in existing.filters):
            # Another library's handler (the SDK's MCPServer calls logging.basicConfig) would
            # print every line a second time, unredacted: this process's logging is ours.
            # mutant: logs.only_redacting_handlers
            root.removeHandler(existing)
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RedactingFilter())  # first: nothing after it sees an unredacted message
    handler.addFilter(LogContextFilter(replica))
    root.addHandler(handler)
