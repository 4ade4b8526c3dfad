"""RFC 9207 ``iss`` in authorization responses, for Starlette responses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc9207 import IssuerParameter
from starlette.responses import Response


class StarletteIssuerParameter(IssuerParameter):  # type: ignore[misc]  # authlib is untyped
    """authlib's RFC 9207 server extension, reading the issuer from a callable.

    authlib's version edits ``response.location`` (a Werkzeug attribute); a
    Starlette response keeps the redirect in its ``location`` header. The
    callable is asked per response, so a test knob can change or drop the
    issuer at run time (``None`` leaves the response without ``iss``).
    """

    def __init__(self, issuer: Callable[[], str | None]) -> None:
        self._issuer = issuer

    def get_issuer(self) -> str | None:
        return self._issuer()

    def add_issuer_parameter(self, authorization_server: Any, response: Response) -> None:
        location = response.headers.get("location")
        issuer = self.get_issuer()
        if location and issuer:
            response.headers["location"] = add_params_to_uri(location, [("iss", issuer)])
