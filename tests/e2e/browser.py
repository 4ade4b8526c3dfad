"""A scripted browser: an httpx client with a cookie jar that follows redirects and submits forms."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin

import httpx


@dataclass
class Form:
    action: str
    method: str
    fields: dict[str, str] = field(default_factory=dict)
    buttons: dict[str, list[str]] = field(default_factory=dict)  # name -> values of submit buttons


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(Form(a.get("action", ""), a.get("method", "get").lower()))
        elif self.forms and tag in ("input", "button") and "name" in a:
            kind = a.get("type", "submit" if tag == "button" else "text")
            if kind == "submit":
                self.forms[-1].buttons.setdefault(a["name"], []).append(a.get("value", ""))
            else:
                self.forms[-1].fields[a["name"]] = a.get("value", "")


def forms_in(html: str) -> list[Form]:
    parser = _FormParser()
    parser.feed(html)
    return parser.forms


class Browser:
    def __init__(self) -> None:
        self.http = httpx.AsyncClient(follow_redirects=True, timeout=15)
        self.visited: list[str] = []

    async def aclose(self) -> None:
        await self.http.aclose()

    async def submit(self, page: httpx.Response, form: Form, **values: str) -> httpx.Response:
        data = {**form.fields, **values}
        url = urljoin(str(page.url), form.action or str(page.url))
        if form.method == "post":
            response = await self.http.post(url, data=data)
        else:
            response = await self.http.get(url, params=data)
        self._record(response)
        return response

    async def get(self, url: str) -> httpx.Response:
        response = await self.http.get(url)
        self._record(response)
        return response

    def _record(self, response: httpx.Response) -> None:
        self.visited += [str(r.url) for r in response.history] + [str(response.url)]

    async def complete_connect(
        self,
        url: str,
        *,
        username: str,
        login: str = "octocat",
        decision: str = "approve",
        consent: bool = True,
        password: str = "any-password",
    ) -> httpx.Response:
        """Open a connect URL; walk the dev-AS login, our confirmation and (unless `consent` is False)
        mockhub's consent page.

        Also oidc-provider's development interactions: its login form (`login` and `password`, as
        `login`/`password`) and, unless `consent` is False, its consent form."""
        page = await self.get(url)
        for _ in range(6):
            forms = forms_in(page.text)
            login_form = next((f for f in forms if "username" in f.fields), None)
            consent_form = next((f for f in forms if "decision" in f.buttons), None)
            confirm_form = next((f for f in forms if "elicitationId" in f.fields), None)
            if login_form is not None:
                page = await self.submit(page, login_form, username=username)
            elif confirm_form is not None:
                page = await self.submit(page, confirm_form)
            elif consent_form is not None and consent:
                page = await self.submit(page, consent_form, login=login, decision=decision)
            elif (oidc_login := _oidc_provider_form(forms, "login")) is not None:
                page = await self.submit(page, oidc_login, login=login, password=password)
            elif (oidc_consent := _oidc_provider_form(forms, "consent")) is not None and consent:
                page = await self.submit(page, oidc_consent)
            else:
                return page
        return page


def _oidc_provider_form(forms: list[Form], prompt: str) -> Form | None:
    """oidc-provider's devInteractions pages: a POST form with a hidden `prompt` of login or consent."""
    for form in forms:
        if form.method != "post" or form.fields.get("prompt") != prompt or form.buttons:
            continue
        if prompt != "login" or ("login" in form.fields and "password" in form.fields):
            return form
    return None
