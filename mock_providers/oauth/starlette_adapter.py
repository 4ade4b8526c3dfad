"""A small adapter running authlib's framework-agnostic OAuth 2 server on Starlette.

authlib's server classes are synchronous and read request data through
``OAuth2Request``/``JsonRequest`` objects. Starlette reads bodies
asynchronously, so a handler first reads the request with
:func:`read_oauth2_request` or :func:`read_json_request` and then hands the
resulting (fully buffered) authlib request to the synchronous server. The
servers here keep everything in memory, so running them on the event loop is
fine for development use.

authlib ships no type information, so every class deriving from an authlib
class carries ``# type: ignore[misc]`` ("subclass of Any").
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    InvalidRequestError,
    JsonPayload,
    JsonRequest,
    MissingAuthorizationError,
    OAuth2Error,
    OAuth2Payload,
    OAuth2Request,
    UnsupportedTokenTypeError,
)
from starlette.requests import Request
from starlette.responses import Response

from mock_providers.oauth.issuer_parameter import StarletteIssuerParameter

_FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
#: Token endpoint parameters that may appear once only (RFC 6749 section 3.2; RFC 7636 section 4.5).
#: RFC 8707's ``resource`` is not among them: it may legitimately repeat.
_SINGLE_TOKEN_PARAMETERS = (
    "grant_type",
    "code",
    "redirect_uri",
    "client_id",
    "client_secret",
    "code_verifier",
    "refresh_token",
    "scope",
)


class StarletteOAuth2Payload(OAuth2Payload):  # type: ignore[misc]  # authlib is untyped
    """Parameters of one request: query parameters for GET, form fields for POST."""

    def __init__(self, items: Iterable[tuple[str, str]]) -> None:
        datalist: defaultdict[str, list[str]] = defaultdict(list)
        for key, value in items:
            datalist[key].append(value)
        self._datalist = datalist
        self._data = {key: values[0] for key, values in datalist.items()}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return self._datalist


class StarletteOAuth2Request(OAuth2Request):  # type: ignore[misc]  # authlib is untyped
    """An authlib ``OAuth2Request`` built from an already-read Starlette request."""

    def __init__(
        self,
        method: str,
        uri: str,
        headers: Mapping[str, str],
        query: list[tuple[str, str]],
        form: list[tuple[str, str]],
    ) -> None:
        super().__init__(method=method, uri=uri, headers=headers)
        self._args = StarletteOAuth2Payload(query).data
        self._form = StarletteOAuth2Payload(form).data
        self.payload = StarletteOAuth2Payload(form if method == "POST" else query)

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class StarletteJsonPayload(JsonPayload):  # type: ignore[misc]  # authlib is untyped
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def data(self) -> dict[str, Any]:
        return self._data


class StarletteJsonRequest(JsonRequest):  # type: ignore[misc]  # authlib is untyped
    def __init__(self, method: str, uri: str, headers: Mapping[str, str], data: dict[str, Any]) -> None:
        super().__init__(method, uri, headers)
        self.payload = StarletteJsonPayload(data)


def public_uri(request: Request, origin: str) -> str:
    """The request URL as seen under the configured public origin.

    authlib only uses it for its transport-security check, which accepts https
    and loopback http origins.
    """
    uri = origin.rstrip("/") + request.url.path
    if request.url.query:
        uri += "?" + request.url.query
    return uri


async def read_form_items(request: Request) -> list[tuple[str, str]]:
    """The urlencoded form fields of a POST (empty for anything else)."""
    if request.method != "POST":
        return []
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != _FORM_CONTENT_TYPE:
        return []
    form = await request.form()
    return [(key, value) for key, value in form.multi_items() if isinstance(value, str)]


async def read_oauth2_request(
    request: Request, origin: str, defaults: Mapping[str, str] | None = None
) -> StarletteOAuth2Request:
    """Read a Starlette request completely and wrap it for authlib.

    ``defaults`` fills in parameters the request lacks (in the form of a POST,
    the query otherwise): for providers that make some OAuth parameter
    optional, such as Slack's ``response_type`` and ``grant_type``.

    Raises authlib's ``InsecureTransportError`` when ``origin`` is neither https
    nor loopback http.
    """
    form = await read_form_items(request)
    query = list(request.query_params.multi_items())
    if defaults:
        target = form if request.method == "POST" else query
        present = {key for key, _ in target}
        target.extend((key, value) for key, value in defaults.items() if key not in present)
    return StarletteOAuth2Request(
        method=request.method,
        uri=public_uri(request, origin),
        headers=request.headers,
        query=query,
        form=form,
    )


async def read_json_request(request: Request, origin: str) -> StarletteJsonRequest:
    """Read a JSON body for authlib; anything that is not a JSON object reads as ``{}``."""
    body = await request.body()
    try:
        data = json.loads(body) if body else {}
    except (ValueError, UnicodeDecodeError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    return StarletteJsonRequest(request.method, public_uri(request, origin), request.headers, data)


def to_starlette_response(status: int, body: Any, headers: Iterable[tuple[str, str]]) -> Response:
    """Turn authlib's ``(status, body, headers)`` triple into a Starlette response."""
    content: bytes
    if isinstance(body, dict):
        content = json.dumps(body).encode("utf-8")
    elif isinstance(body, bytes):
        content = body
    else:
        content = str(body or "").encode("utf-8")
    response = Response(content=content, status_code=status)
    for key, value in headers:
        response.headers[key] = value
    return response


class StarletteAuthorizationServer(AuthorizationServer):  # type: ignore[misc]  # authlib is untyped
    """authlib ``AuthorizationServer`` whose requests are pre-read Starlette requests."""

    #: RFC 9207 extension, if registered; also applied to error redirects.
    issuer_parameter: StarletteIssuerParameter | None = None

    def create_oauth2_request(self, request: object) -> OAuth2Request:
        if isinstance(request, OAuth2Request):
            return request
        raise TypeError("read the Starlette request with read_oauth2_request() first")

    def create_json_request(self, request: object) -> JsonRequest:
        if isinstance(request, JsonRequest):
            return request
        raise TypeError("read the Starlette request with read_json_request() first")

    def handle_response(self, status: int, body: Any, headers: Iterable[tuple[str, str]]) -> Response:
        return to_starlette_response(status, body, headers)

    def create_token_response(self, request: object = None) -> Response:
        """authlib's token response, after refusing repeated parameters: RFC 6749 section 3.2
        says they MUST NOT repeat, and authlib would silently take the first."""
        oauth_request = self.create_oauth2_request(request)
        datalist = oauth_request.payload.datalist
        repeated = [name for name in _SINGLE_TOKEN_PARAMETERS if len(datalist.get(name, [])) > 1]
        if repeated:
            error = InvalidRequestError(f"Repeated parameter: {', '.join(repeated)}.")
            return self.handle_error_response(oauth_request, error)
        response: Response = super().create_token_response(oauth_request)
        return response

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """authlib calls this on events; nothing listens here."""

    def handle_error_response(self, request: OAuth2Request | None, error: OAuth2Error) -> Response:
        response = to_starlette_response(*error(self.get_error_uri(request, error)))
        if isinstance(error, MissingAuthorizationError | UnsupportedTokenTypeError):
            # RFC 6750 section 3.1: no error code when the request carried no usable
            # token; authlib would send a lowercase scheme and a non-standard code.
            realm = f' realm="{error.realm}"' if error.realm else ""
            response.headers["WWW-Authenticate"] = "Bearer" + realm
        return response

    def authorization_error_response(self, request: OAuth2Request, error: OAuth2Error) -> Response | None:
        """The redirect to the client for an authorization error.

        ``None`` when the error must not be redirected: authlib leaves
        ``redirect_uri`` unset until client and redirect URI are validated.
        """
        if not error.redirect_uri:
            return None
        response = self.handle_error_response(request, error)
        if self.issuer_parameter is not None:
            self.issuer_parameter.add_issuer_parameter(self, response)
        return response
