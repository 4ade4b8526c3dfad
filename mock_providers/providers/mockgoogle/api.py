"""MockGoogle's stand-in for Google's APIs, under MockGoogle's prefix (the ``google`` preset's API
base): Drive's ``files.list`` (``GET /drive/v3/files``), paged by ``pageSize`` and
``pageToken`` / ``nextPageToken``, with Google's error objects (``{"error": {"code", "message",
"errors", "status"}}``) and its scope check (a Drive scope, else 403 ``PERMISSION_DENIED``).

The world: each account has ``files_per_user`` files in its Drive (or as many as
``set_file_count`` says), with stable ids.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

from mock_providers.api.exchange import ApiAnswer, ApiRequest, Handler
from mock_providers.api.pagination import continuation, continued_from, int_param
from mock_providers.api.stand_in import StandInApi, retry_after_header

SCOPE_BASE = "https://www.googleapis.com/auth/"
# Any of these lets a token list files (Drive API scopes).
DRIVE_SCOPES = frozenset(
    SCOPE_BASE + name
    for name in (
        "drive",
        "drive.readonly",
        "drive.file",
        "drive.metadata",
        "drive.metadata.readonly",
        "drive.appdata",
        "drive.photos.readonly",
    )
)
REALM = 'Bearer realm="https://accounts.google.com/"'
_KINDS = (
    ("application/vnd.google-apps.document", "Meeting notes"),
    ("application/vnd.google-apps.spreadsheet", "Budget"),
    ("application/vnd.google-apps.presentation", "Roadmap"),
    ("application/vnd.google-apps.folder", "Projects"),
    ("application/pdf", "Invoice"),
)


def google_error(code: int, status: str, message: str, reason: str, **where: str) -> dict[str, Any]:
    """Google's error object (the ``errors`` list is the v1 shape Drive still sends)."""
    detail = {"message": message, "domain": "global", "reason": reason, **where}
    return {"error": {"code": code, "message": message, "errors": [detail], "status": status}}


def drive_file(email: str, number: int) -> dict[str, Any]:
    """The ``number``-th file of ``email``'s Drive, with the fields ``files.list`` returns by default."""
    digest = hashlib.sha256(f"drive:{email.lower()}:{number}".encode()).digest()
    mime_type, stem = _KINDS[number % len(_KINDS)]
    return {
        "kind": "drive#file",
        "mimeType": mime_type,
        "id": "1" + base64.urlsafe_b64encode(digest).decode()[:32],
        "name": f"{stem} {number}",
    }


class GoogleApi(StandInApi):
    """Google's APIs as MockGoogle serves them (``google.api``)."""

    provider = "Google"

    def __init__(self, email_domain: str) -> None:
        self.email_domain = email_domain
        #: How many files an account's Drive holds unless ``set_file_count`` says otherwise.
        self.files_per_user = 5
        self._file_counts: dict[str, int] = {}
        super().__init__()

    def set_file_count(self, login: str, count: int) -> None:
        """``login`` (an email address, or a bare name at MockGoogle's domain) has ``count`` files."""
        if count < 0:
            raise ValueError("a file count is not negative")
        self._file_counts[self._email(login)] = count

    def files_of(self, login: str) -> list[dict[str, Any]]:
        count = self._file_counts.get(self._email(login), self.files_per_user)
        return [drive_file(self._email(login), n) for n in range(1, count + 1)]

    def _email(self, login: str) -> str:
        return (login if "@" in login else f"{login}@{self.email_domain}").lower()

    # -- Google's answers ------------------------------------------------------------------------

    def builtin_routes(self) -> Iterable[tuple[str, str, Handler]]:
        return (("GET", "/drive/v3/files", self.list_files),)

    def list_files(self, request: ApiRequest) -> ApiAnswer:
        """Drive ``files.list``: 100 files a page by default, at most 1000."""
        if not DRIVE_SCOPES & set(request.owner.scopes):
            return self._insufficient_scope()
        files = self.files_of(request.owner.login)
        size = int_param(request.query, "pageSize", 100, 1, 1000)
        start = 0
        if "pageToken" in request.query:
            offset = continued_from("drive", request.query["pageToken"])
            if offset is None:
                invalid = google_error(
                    400,
                    "INVALID_ARGUMENT",
                    "Invalid Value",
                    "invalid",
                    location="pageToken",
                    locationType="parameter",
                )
                return ApiAnswer(invalid, 400)
            start = offset
        body: dict[str, Any] = {
            "kind": "drive#fileList",
            "incompleteSearch": False,
            "files": files[start : start + size],
        }
        if start + size < len(files):
            body["nextPageToken"] = continuation("drive", start + size)
        return ApiAnswer(body)

    def _insufficient_scope(self) -> ApiAnswer:
        body = google_error(
            403,
            "PERMISSION_DENIED",
            "Request had insufficient authentication scopes.",
            "insufficientPermissions",
        )
        scope = " ".join(sorted(DRIVE_SCOPES))
        header = f'{REALM}, error="insufficient_scope", scope="{scope}"'
        return ApiAnswer(body, 403, {"WWW-Authenticate": header})

    def too_many_requests(self, retry_after: int | None) -> ApiAnswer:
        message = "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user'."
        body = google_error(429, "RESOURCE_EXHAUSTED", message, "rateLimitExceeded")
        return ApiAnswer(body, 429, retry_after_header(retry_after))

    def not_found(self, request: ApiRequest) -> ApiAnswer:
        return ApiAnswer(google_error(404, "NOT_FOUND", "Not Found", "notFound"), 404)

    def unauthorized(self, reason: str) -> ApiAnswer:
        message = "Request had invalid authentication credentials. Expected OAuth 2 access token."
        body = google_error(401, "UNAUTHENTICATED", message, "authError", location="Authorization")
        return ApiAnswer(body, 401, {"WWW-Authenticate": f'{REALM}, error="invalid_token"'})
