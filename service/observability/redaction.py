"""Log redaction: no token, code, verifier, state, cookie or client secret reaches a log line,
and no URL beyond its scheme, host and the shape of its path.

A filter on the handlers (not the loggers), so records from every library — uvicorn's access
log with `/callback?code=...`, httpx and httpx2 (authlib's) with each outbound request's URL —
pass through it.
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
# The shortcut: every match above contains a field name ending in one of these words followed
# by `:`, `=` or `%3D` (quotes and spaces between), or one of `_MARKERS`. Most log lines (uvicorn's
# access line, httpx's request line, an audit event) have none: one lower-casing and a few
# substring tests then replace five regex substitutions. The shortcut only has to be looser than
# the patterns, never stricter; it applies to ASCII text only, because the patterns' (?i) also
# equates some non-ASCII letters with ASCII ones (U+017F with "s", U+212A with "k").
_NAME_ENDINGS = (
    "code|state|token|verifier|secret|password|elicitation_?id|assertion|nonce|session"  # not secrets
)
_WORDS = ("code", "state", "token", "verifier", "secret", "password", "elicitation", "assertion", "nonce")
_MARKERS = ("session", "bearer", "basic", "cookie", "eyj")
_MAYBE_SECRET = re.compile(rf"(?:{_NAME_ENDINGS})['\"]?\s*(?:[:=]|%3d)|{'|'.join(_MARKERS)}")


# An absolute URL: scheme, authority (userinfo, host, port), then path, query and fragment, up to
# a space, a quote or an angle bracket (httpx writes `POST https://host/path?query "HTTP/1.1 200 OK"`).
_URL = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?:[^\s/?#@'\"<>]*@)?(?P<host>\[[^\]\s]*\]|[^\s/?#:'\"<>]*)"
    r"(?P<port>:[0-9]*)?(?P<path>/[^\s?#'\"<>]*)?(?:[?#][^\s'\"<>]*)?"
)


def _url_shape(match: re.Match[str]) -> str:
    # Each path segment becomes `*`: how deep, not what (a webhook URL's path may be its secret).
    path = re.sub(r"[^/]+", "*", match.group("path") or "")
    return f"{match.group('scheme')}{match.group('host')}{match.group('port') or ''}{path}"


def keep_only_url_shape(text: str) -> str:
    """`text` with every absolute URL cut to its scheme, host, port and path shape
    (`https://hooks.example/*/*/*`): an outbound URL may carry a secret in its path, query or
    userinfo (a webhook receiver's path token, a `?sig=` signature, a password), and httpx logs
    the full URL of every request at INFO (RFC 9110 §4.2.4: userinfo is deprecated because it
    leaks; OWASP Logging Cheat Sheet, "Data to exclude": access tokens, passwords, secrets)."""
    if "://" not in text:
        return text
    # mutant: redaction.url_shape_only
    return _URL.sub(_url_shape, text)


def _may_hold_a_secret(text: str) -> bool:
    if not text.isascii():
        return True
    lowered = text.lower()
    if not any(word in lowered for word in (*_WORDS, *_MARKERS)):
        return False
    return _MAYBE_SECRET.search(lowered) is not None


def _splice(match: re.Match[str]) -> str:
    start, end = match.span("v")
    whole = match.group(0)
    offset = match.start(0)
    return whole[: start - offset] + REDACTED + whole[end - offset :]


# mutant: redaction.secrets_redacted
def redact(text: str) -> str:
    if not _may_hold_a_secret(text):
        return text
    return redact_every_pattern(text)


def redact_every_pattern(text: str) -> str:
    """`redact` without the shortcut (tests compare the two)."""
    for pattern in _PATTERNS:
        text = pattern.sub(_splice, text)
    return _JWT.sub(REDACTED, text)


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            rendered = record.getMessage()
        except Exception:  # a bad format string must not drop the record or leak its args
            rendered = str(record.msg)
        record.msg, record.args = redact(keep_only_url_shape(rendered)), None
        if record.exc_info and record.exc_info[1] is not None:
            # Exception messages can carry URLs with codes: render and redact the traceback now.
            formatter = logging.Formatter()
            record.exc_text = redact(keep_only_url_shape(formatter.formatException(record.exc_info)))
            record.exc_info = None
        return True
