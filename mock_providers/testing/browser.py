"""A scripted browser (an httpx client with a cookie jar that follows redirects and submits forms)
and the scripted user built on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin

import httpx

from mock_providers.testing.tls import client_tls


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
    """With `local_address`, every request leaves from that source address (a loopback one:
    127.0.0.x), as from another machine or another NAT."""

    def __init__(self, cookies: httpx.Cookies | None = None, local_address: str | None = None) -> None:
        transport = (
            None
            if local_address is None
            else httpx.AsyncHTTPTransport(verify=client_tls(), local_address=local_address)
        )
        self.http = httpx.AsyncClient(
            follow_redirects=True, timeout=15, cookies=cookies, verify=client_tls(), transport=transport
        )
        self.visited: list[str] = []

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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
        password: str = "any-password",  # noqa: S107 - dev logins accept any password
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


async def callback_location(browser: Browser, url: str, username: str = "alice") -> str:
    """Walk a connect link to the provider's consent page, approve, and return the redirect back to
    /callback without following it."""
    page = await browser.complete_connect(url, username=username, consent=False)
    [consent] = [f for f in forms_in(page.text) if "decision" in f.buttons]
    async with httpx.AsyncClient(
        cookies=browser.http.cookies, follow_redirects=False, verify=client_tls()
    ) as raw:
        target = str(page.url.join(consent.action or str(page.url)))
        answer = await raw.post(target, data={**consent.fields, "login": "octocat", "decision": "approve"})
    assert answer.status_code in (302, 303)
    return str(answer.headers["location"])


# ---- the scripted user -----------------------------------------------------------------------


class FlowError(AssertionError):
    """The browser leg did not end where the test expected; `page` names where it did end."""

    def __init__(self, expected: str, page: str, status: int, url: str) -> None:
        super().__init__(f"expected the {expected} page, ended on {page!r} (HTTP {status}) at {url}")
        self.page = page
        self.status = status
        self.url = url


class _Heading(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.h1: str | None = None
        self._in_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_h1 = tag == "h1" and self.h1 is None

    def handle_data(self, data: str) -> None:
        if self._in_h1 and data.strip():
            self.h1 = data.strip()
            self._in_h1 = False


def page_name(page: httpx.Response) -> str:
    """The page's heading (e.g. "Not your link"), as a person would name it."""
    parser = _Heading()
    parser.feed(page.text)
    return parser.h1 or f"<no heading: {page.text[:80]!r}>"


# Our own pages (connect_routes/templates): connected.html and provider_error.html.
SUCCESS_HEADING = "Connected to "
DENIED_HEADING = "did not grant access"


class ScriptedUser:
    """A person at a browser, signed in to the dev AS as `user`: opens connect links and walks the
    real pages (dev login, our confirmation page, the provider's consent) over HTTP. The cookie jar
    lasts as long as the object; each walk opens (and closes) its own HTTP client on it."""

    def __init__(self, user: str) -> None:
        self.user = user
        self.cookies = httpx.Cookies()
        self.visited: list[str] = []

    async def approve(self, url: str, login: str = "octocat") -> httpx.Response:
        """Connect `login`'s provider account; the success page, or FlowError naming the page reached."""
        page = await self._walk(url, login, "approve")
        if page.status_code != 200 or SUCCESS_HEADING not in page_name(page):
            raise FlowError("success", page_name(page), page.status_code, str(page.url))
        return page

    async def deny(self, url: str, login: str = "octocat") -> httpx.Response:
        """Refuse at the provider's consent page; the denied page, or FlowError naming the page reached."""
        page = await self._walk(url, login, "deny")
        if DENIED_HEADING not in page_name(page):
            raise FlowError("denied", page_name(page), page.status_code, str(page.url))
        return page

    async def _walk(self, url: str, login: str, decision: str) -> httpx.Response:
        async with Browser(self.cookies) as browser:
            page = await browser.complete_connect(url, username=self.user, login=login, decision=decision)
            self.visited += browser.visited
            self.cookies = browser.http.cookies  # the client copied the jar it was given
            await page.aread()
            return page
