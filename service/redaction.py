"""Log redaction: no token, code, verifier, state, cookie or client secret reaches a log line.

A filter on the handlers (not the loggers), so records from every library — uvicorn's access
log with `/callback?code=...`, httpx, authlib — pass through it.
"""

from __future__ import annotations

import logging
import re

REDACTED = "[redacted]"

# Names whose values are secret, wherever they appear: `name=value` (query, form, repr),
# `"name": "value"` / `'name': 'value'` (JSON, Python dicts), `name%3Dvalue` (an encoded URL
# inside a URL) and cookie names in header dumps such as httpcore's `(b'set-cookie', b'…')`.
_SENSITIVE_FIELDS = (  # names of secrets, not a secret
    r"code|state|access_token|refresh_token|id_token|code_verifier|client_secret|password|token"
    r"|requestState|request_state|elicitationId|elicitation_id|assertion|(?:__Host-)?[A-Za-z]*_?session"
)
_PATTERNS = (
    re.compile(
        rf"(?i)(?:(?<=%[0-9A-Fa-f]{{2}})|(?<![A-Za-z0-9_]))['\"]?({_SENSITIVE_FIELDS})['\"]?\s*(?:=|:|%3D)\s*b?['\"]?([^'\"&\s,;)}}\]%]+)"
    ),
    re.compile(r"(?i)\b(bearer|basic)\s+([A-Za-z0-9._~+/=-]+)"),
    re.compile(r"(?i)\b(cookie|set-cookie):\s*([^\r\n]+)"),
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(0).replace(m.group(2), REDACTED), text)
    return _JWT.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            rendered = record.getMessage()
        except Exception:  # a bad format string must not drop the record or leak its args
            rendered = str(record.msg)
        record.msg, record.args = redact(rendered), None
        if record.exc_info and record.exc_info[1] is not None:
            # Exception messages can carry URLs with codes: render and redact the traceback now.
            formatter = logging.Formatter()
            record.exc_text = redact(formatter.formatException(record.exc_info))
            record.exc_info = None
        return True


def configure_logging(level: str = "INFO") -> None:
    """Root logging to stderr through the redacting filter (idempotent)."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in root.handlers:
        if any(isinstance(f, RedactingFilter) for f in handler.filters):
            return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
