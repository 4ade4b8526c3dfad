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
    r"|requestState|request_state|elicitationId|elicitation_id|assertion|nonce|(?:__Host-)?[A-Za-z]*_?session"
)
_NAME = rf"(?:(?<=%[0-9A-Fa-f]{{2}})|(?<![A-Za-z0-9_]))['\"]?(?:{_SENSITIVE_FIELDS})['\"]?"
# Each pattern's group "v" is the secret; only that span is replaced.
_PATTERNS = (
    # quoted: "name": "value" / 'name': 'value' / name='value' / (b'set-cookie', b'name=value')
    re.compile(rf"(?i){_NAME}\s*[:=]\s*b?(?P<q>['\"])(?P<v>(?:\\.|(?!(?P=q)).)*)(?P=q)"),
    # unquoted: name=value in queries and forms, name%3Dvalue in an encoded URL; the value runs
    # through %-escapes other than an encoded `&` or `=`.
    re.compile(rf"(?i){_NAME}\s*(?:=|:|%3D)\s*(?P<v>(?:%(?!26|3[Dd])[0-9A-Fa-f]{{2}}|[^'\"&\s;)}}\]%])+)"),
    re.compile(r"(?i)\b(?:bearer|basic)\s+(?P<v>[A-Za-z0-9._~+/=-]+)"),
    re.compile(r"(?i)\b(?:cookie|set-cookie):\s*(?P<v>[^\r\n]+)"),
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")


def _splice(match: re.Match[str]) -> str:
    start, end = match.span("v")
    whole = match.group(0)
    offset = match.start(0)
    return whole[: start - offset] + REDACTED + whole[end - offset :]


def redact(text: str) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(_splice, text)
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
