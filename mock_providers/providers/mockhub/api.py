"""MockHub's stand-in for GitHub's REST API, under MockHub's prefix (the ``github`` preset's API
base): ``GET /user/repos``, ``GET /repos/{owner}/{repo}``, ``GET``/``POST
/repos/{owner}/{repo}/issues`` and ``GET /repos/{owner}/{repo}/issues/{number}``, in GitHub's
shapes (repositories with their ``*_url`` fields, so a page of 100 weighs what GitHub's does),
paged by ``per_page``/``page`` with a ``Link`` header, and GitHub's rate limits: ``X-RateLimit-*``
on every answer, the primary limit (403 with ``X-RateLimit-Remaining: 0`` until
``X-RateLimit-Reset``) and secondary limits (403 with ``Retry-After``, or with the reset time).

The world: each account owns ``repos_per_user`` public repositories ``<login>/repo-001``, … (or
as many as ``set_repo_count`` says), and the organisation repository ``acme/widgets`` (the one
docs/tools.md's example reads) exists too. Issues are created by ``POST`` and kept in memory.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from mock_providers.api.exchange import ApiAnswer, ApiRequest, Handler
from mock_providers.api.pagination import link_header, page_numbers
from mock_providers.api.stand_in import StandInApi, retry_after_header
from mock_providers.providers.mockhub.accounts import LOGIN_PATTERN, MockHubAccount

DOCS = "https://docs.github.com/rest"
RATE_LIMIT_DOCS = DOCS + "/using-the-rest-api/rate-limits-for-the-rest-api"
WEB = "https://mockhub.test"  # html_url and clone URLs: a reserved name (RFC 2606), never a real site
SAMPLE_REPOSITORY = "acme/widgets"
ORGANISATIONS = frozenset({"acme"})
RATE_LIMIT = 5000  # GitHub's primary limit for a user's token, per hour
RATE_WINDOW = 3600
WRITE_SCOPES = frozenset({"repo", "public_repo"})
_EPOCH = datetime(2015, 1, 1, tzinfo=UTC)

# A repository's URL fields, as GitHub sends them: (field, suffix after the repository's API URL).
_REPO_URLS = (
    ("archive_url", "/{archive_format}{/ref}"),
    ("assignees_url", "/assignees{/user}"),
    ("blobs_url", "/git/blobs{/sha}"),
    ("branches_url", "/branches{/branch}"),
    ("collaborators_url", "/collaborators{/collaborator}"),
    ("comments_url", "/comments{/number}"),
    ("commits_url", "/commits{/sha}"),
    ("compare_url", "/compare/{base}...{head}"),
    ("contents_url", "/contents/{+path}"),
    ("contributors_url", "/contributors"),
    ("deployments_url", "/deployments"),
    ("downloads_url", "/downloads"),
    ("events_url", "/events"),
    ("forks_url", "/forks"),
    ("git_commits_url", "/git/commits{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"),
    ("git_tags_url", "/git/tags{/sha}"),
    ("hooks_url", "/hooks"),
    ("issue_comment_url", "/issues/comments{/number}"),
    ("issue_events_url", "/issues/events{/number}"),
    ("issues_url", "/issues{/number}"),
    ("keys_url", "/keys{/key_id}"),
    ("labels_url", "/labels{/name}"),
    ("languages_url", "/languages"),
    ("merges_url", "/merges"),
    ("milestones_url", "/milestones{/number}"),
    ("notifications_url", "/notifications{?since,all,participating}"),
    ("pulls_url", "/pulls{/number}"),
    ("releases_url", "/releases{/id}"),
    ("stargazers_url", "/stargazers"),
    ("statuses_url", "/statuses/{sha}"),
    ("subscribers_url", "/subscribers"),
    ("subscription_url", "/subscription"),
    ("tags_url", "/tags"),
    ("teams_url", "/teams"),
    ("trees_url", "/git/trees{/sha}"),
)
_USER_URLS = (
    ("followers_url", "/followers"),
    ("following_url", "/following{/other_user}"),
    ("gists_url", "/gists{/gist_id}"),
    ("starred_url", "/starred{/owner}{/repo}"),
    ("subscriptions_url", "/subscriptions"),
    ("organizations_url", "/orgs"),
    ("repos_url", "/repos"),
    ("events_url", "/events{/privacy}"),
    ("received_events_url", "/received_events"),
)


def _node_id(kind: str, number: int) -> str:
    """GitHub's (legacy) global node id: base64 of ``<type number>:<Type><id>``."""
    return base64.b64encode(f"{kind}{number}".encode()).decode()


def _timestamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _stable_number(text: str) -> int:
    return (
        10_000_000 + int.from_bytes(hashlib.sha256(text.lower().encode()).digest()[:4], "big") % 900_000_000
    )


@dataclass(frozen=True)
class Repository:
    owner: str
    name: str
    index: int  # its place among its owner's repositories: dates and sizes derive from it
    private: bool = False

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def id(self) -> int:
        return _stable_number("repo:" + self.full_name)

    @property
    def created(self) -> datetime:
        return _EPOCH + timedelta(days=self.index, hours=self.index % 24)

    @property
    def pushed(self) -> datetime:
        """Its last push (and update): a month or more after it was created."""
        return self.created + timedelta(days=30 + self.index % 97)


@dataclass
class Issue:
    number: int
    title: str
    body: str | None
    author: str
    assignees: list[str]
    labels: list[str]
    created: datetime
    state: str = "open"


def simple_user(api_base: str, login: str) -> dict[str, Any]:
    """GitHub's "simple user" object."""
    account_id = MockHubAccount.for_login(login).id
    url = f"{api_base}/users/{login}"
    user: dict[str, Any] = {
        "login": login,
        "id": account_id,
        "node_id": _node_id("04:User", account_id),
        "avatar_url": f"{WEB}/avatars/u/{account_id}?v=4",
        "gravatar_id": "",
        "url": url,
        "html_url": f"{WEB}/{login}",
    }
    user.update({name: url + suffix for name, suffix in _USER_URLS})
    user.update(
        type="Organization" if login.lower() in ORGANISATIONS else "User",
        user_view_type="public",
        site_admin=False,
    )
    return user


def repository_json(api_base: str, repo: Repository, open_issues: int, caller: str) -> dict[str, Any]:
    """A repository as ``GET /user/repos`` lists it."""
    url = f"{api_base}/repos/{repo.full_name}"
    html = f"{WEB}/{repo.full_name}"
    created, updated = repo.created, repo.pushed
    body: dict[str, Any] = {
        "id": repo.id,
        "node_id": _node_id("010:Repository", repo.id),
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
        "owner": simple_user(api_base, repo.owner),
        "html_url": html,
        "description": f"{repo.name}, a repository of {repo.owner} at MockHub",
        "fork": False,
        "url": url,
    }
    body.update({name: url + suffix for name, suffix in _REPO_URLS})
    owner = repo.owner.lower() == caller.lower()
    body.update(
        git_url=f"git://mockhub.test/{repo.full_name}.git",
        ssh_url=f"git@mockhub.test:{repo.full_name}.git",
        clone_url=f"{html}.git",
        svn_url=html,
        mirror_url=None,
        homepage=None,
        language=("Python", "TypeScript", "Go", "Rust", None)[repo.index % 5],
        forks_count=repo.index % 7,
        stargazers_count=(repo.index * 13) % 101,
        watchers_count=(repo.index * 13) % 101,
        size=100 + repo.index * 17 % 5000,
        default_branch="main",
        open_issues_count=open_issues,
        is_template=False,
        topics=[],
        has_issues=True,
        has_projects=True,
        has_wiki=True,
        has_pages=False,
        has_downloads=True,
        has_discussions=False,
        archived=False,
        disabled=False,
        visibility="private" if repo.private else "public",
        pushed_at=_timestamp(updated),
        created_at=_timestamp(created),
        updated_at=_timestamp(updated),
        permissions={"admin": owner, "maintain": owner, "push": owner, "triage": owner, "pull": True},
        allow_forking=True,
        web_commit_signoff_required=False,
        license=None,
        forks=repo.index % 7,
        open_issues=open_issues,
        watchers=(repo.index * 13) % 101,
    )
    return body


def issue_json(api_base: str, repo: Repository, issue: Issue) -> dict[str, Any]:
    repo_url = f"{api_base}/repos/{repo.full_name}"
    url = f"{repo_url}/issues/{issue.number}"
    issue_id = _stable_number(f"issue:{repo.full_name}#{issue.number}")
    assignees = [simple_user(api_base, login) for login in issue.assignees]
    return {
        "id": issue_id,
        "node_id": _node_id("05:Issue", issue_id),
        "url": url,
        "repository_url": repo_url,
        "labels_url": url + "/labels{/name}",
        "comments_url": url + "/comments",
        "events_url": url + "/events",
        "html_url": f"{WEB}/{repo.full_name}/issues/{issue.number}",
        "number": issue.number,
        "state": issue.state,
        "state_reason": None,
        "title": issue.title,
        "body": issue.body,
        "user": simple_user(api_base, issue.author),
        "labels": [
            {
                "id": _stable_number("label:" + name),
                "url": f"{repo_url}/labels/{name}",
                "name": name,
                "color": "ededed",
                "default": False,
                "description": None,
            }
            for name in issue.labels
        ],
        "assignee": assignees[0] if assignees else None,
        "assignees": assignees,
        "milestone": None,
        "locked": False,
        "active_lock_reason": None,
        "comments": 0,
        "created_at": _timestamp(issue.created),
        "updated_at": _timestamp(issue.created),
        "closed_at": None,
        "author_association": "OWNER" if issue.author.lower() == repo.owner.lower() else "NONE",
    }


@dataclass
class _Limits:
    """GitHub's primary limit (one window, shared by every token: a stand-in simplification)
    and the secondary-limit knob."""

    remaining: int = RATE_LIMIT
    reset_at: float = 0.0
    secondary: int = 0
    secondary_retry_after: int | None = None
    secondary_reset_in: int = 60
    lock: threading.Lock = field(default_factory=threading.Lock)


class GitHubApi(StandInApi):
    """GitHub's REST API as MockHub serves it (``hub.api``)."""

    provider = "GitHub"

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        #: How many repositories an account owns unless ``set_repo_count`` says otherwise.
        self.repos_per_user = 3
        self._repo_counts: dict[str, int] = {}
        self._extra: dict[str, Repository] = {}
        self._issues: dict[str, list[Issue]] = {}
        self._limits = _Limits()
        super().__init__()
        self.add_repository(SAMPLE_REPOSITORY)

    # -- the world -------------------------------------------------------------------------------

    def set_repo_count(self, login: str, count: int) -> None:
        """``login`` owns ``count`` repositories ``<login>/repo-001`` … (``/user/repos`` lists them
        with any added by ``add_repository``)."""
        if count < 0:
            raise ValueError("a repository count is not negative")
        self._repo_counts[login.lower()] = count

    def add_repository(self, full_name: str, *, private: bool = False) -> Repository:
        """A repository ``owner/name`` (besides the generated ones)."""
        owner, _, name = full_name.partition("/")
        if not (LOGIN_PATTERN.match(owner) and name and "/" not in name):
            raise ValueError(f"{full_name!r} is not owner/name")
        repo = Repository(owner, name, len(self._extra), private)
        self._extra[full_name.lower()] = repo
        return repo

    def repositories_of(self, login: str) -> list[Repository]:
        count = self._repo_counts.get(login.lower(), self.repos_per_user)
        owned = [Repository(login, f"repo-{n:03d}", n) for n in range(1, count + 1)]
        owned += [repo for repo in self._extra.values() if repo.owner.lower() == login.lower()]
        return sorted(owned, key=lambda repo: repo.full_name.lower())

    def repository(self, owner: str, name: str) -> Repository | None:
        extra = self._extra.get(f"{owner}/{name}".lower())
        if extra is not None:
            return extra
        count = self._repo_counts.get(owner.lower(), self.repos_per_user)
        if LOGIN_PATTERN.match(owner) and owner.lower() not in ORGANISATIONS and name.startswith("repo-"):
            number = name.removeprefix("repo-")
            if number.isdigit() and len(number) == 3 and 1 <= int(number) <= count:
                return Repository(owner, name, int(number))
        return None

    def issues(self, full_name: str) -> list[Issue]:
        """The issues of a repository, oldest first."""
        return self._issues.setdefault(full_name.lower(), [])

    # -- rate limits -----------------------------------------------------------------------------

    def exhaust_rate_limit(self, reset_in: int = 60) -> None:
        """The primary limit is used up: every request gets 403 with ``X-RateLimit-Remaining:
        0`` until ``X-RateLimit-Reset``, ``reset_in`` seconds from now on MockHub's clock."""
        with self._limits.lock:
            self._limits.remaining, self._limits.reset_at = 0, self.clock() + reset_in

    def secondary_limit(self, times: int = 1, retry_after: int | None = None, reset_in: int = 60) -> None:
        """The next ``times`` requests hit a secondary limit: 403 with ``Retry-After:
        <retry_after>``, or without one ``X-RateLimit-Remaining: 0`` and ``X-RateLimit-Reset``
        ``reset_in`` seconds from now (GitHub sends either)."""
        with self._limits.lock:
            self._limits.secondary = times
            self._limits.secondary_retry_after = retry_after
            self._limits.secondary_reset_in = reset_in

    def reset(self) -> None:
        super().reset()
        with self._limits.lock:
            self._limits.remaining, self._limits.reset_at, self._limits.secondary = RATE_LIMIT, 0.0, 0

    def refused(self, request: ApiRequest) -> ApiAnswer | None:
        now, limits = self.clock(), self._limits
        with limits.lock:
            if now >= limits.reset_at:
                limits.remaining, limits.reset_at = RATE_LIMIT, now + RATE_WINDOW
            if limits.remaining <= 0:
                return self._primary_limit(request)
            if limits.secondary > 0:
                limits.secondary -= 1
                return self._secondary_limit(now)
            limits.remaining -= 1
        return super().refused(request)

    def _primary_limit(self, request: ApiRequest) -> ApiAnswer:
        message = f"API rate limit exceeded for user ID {request.owner.id}."
        return ApiAnswer({"message": message, "documentation_url": RATE_LIMIT_DOCS}, 403)

    def _secondary_limit(self, now: float) -> ApiAnswer:
        body = {
            "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you "
            "try again.",
            "documentation_url": RATE_LIMIT_DOCS + "#about-secondary-rate-limits",
        }
        retry_after = self._limits.secondary_retry_after
        if retry_after is not None:
            return ApiAnswer(body, 403, retry_after_header(retry_after))
        reset = int(now) + self._limits.secondary_reset_in
        return ApiAnswer(body, 403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)})

    def finish(self, request: ApiRequest, answer: ApiAnswer) -> ApiAnswer:
        limits = self._limits
        with limits.lock:
            remaining, reset_at = limits.remaining, limits.reset_at
        return answer.with_headers(
            {
                "X-RateLimit-Limit": str(RATE_LIMIT),
                "X-RateLimit-Remaining": str(remaining),
                "X-RateLimit-Reset": str(int(reset_at)),
                "X-RateLimit-Used": str(RATE_LIMIT - remaining),
                "X-RateLimit-Resource": "core",
                "X-OAuth-Scopes": ", ".join(request.owner.scopes),
                "X-GitHub-Media-Type": "github.v3; format=json",
            }
        )

    # -- GitHub's answers ------------------------------------------------------------------------

    def too_many_requests(self, retry_after: int | None) -> ApiAnswer:
        body = {"message": "You have exceeded a secondary rate limit.", "documentation_url": RATE_LIMIT_DOCS}
        return ApiAnswer(body, 429, retry_after_header(retry_after))

    def not_found(self, request: ApiRequest) -> ApiAnswer:
        return ApiAnswer({"message": "Not Found", "documentation_url": DOCS, "status": "404"}, 404)

    def unauthorized(self, reason: str) -> ApiAnswer:
        return ApiAnswer({"message": "Bad credentials", "documentation_url": DOCS, "status": "401"}, 401)

    def builtin_routes(self) -> Iterable[tuple[str, str, Handler]]:
        return (
            ("GET", "/user/repos", self.list_repositories),
            ("GET", "/repos/{owner}/{repo}", self.get_repository),
            ("GET", "/repos/{owner}/{repo}/issues", self.list_issues),
            ("POST", "/repos/{owner}/{repo}/issues", self.create_issue),
            ("GET", "/repos/{owner}/{repo}/issues/{number}", self.get_issue),
        )

    def list_repositories(self, request: ApiRequest) -> ApiAnswer:
        """``GET /user/repos``: the caller's repositories, 30 a page by default, at most 100;
        ``sort`` by ``full_name`` (ascending by default) or ``created``, ``updated``, ``pushed``
        (newest first by default), ``direction`` to turn it round."""
        repos = self.repositories_of(request.owner.login)
        sort = request.query.get("sort", "full_name")
        by_date = sort in ("created", "updated", "pushed")
        if by_date:  # newest first
            repos.sort(key=lambda r: r.created if sort == "created" else r.pushed, reverse=True)
        default = "desc" if by_date else "asc"
        if request.query.get("direction", default) != default:
            repos.reverse()
        page, number, last = page_numbers(repos, request.query, 30, 100)
        base = _api_base(request)
        body = [repository_json(base, r, self._open_issues(r), request.owner.login) for r in page]
        return _paged(body, request.url, number, last)

    def get_repository(self, request: ApiRequest) -> ApiAnswer:
        repo = self._repository(request)
        if repo is None:
            return self.not_found(request)
        return ApiAnswer(
            repository_json(_api_base(request), repo, self._open_issues(repo), request.owner.login)
        )

    def list_issues(self, request: ApiRequest) -> ApiAnswer:
        """``GET /repos/{owner}/{repo}/issues``: ``state`` (open), ``assignee``, ``creator``,
        ``labels``, ``direction`` (desc: newest first), 30 a page by default, at most 100."""
        repo = self._repository(request)
        if repo is None:
            return self.not_found(request)
        found = [i for i in self.issues(repo.full_name) if _selected(i, request.query, request.owner.login)]
        if request.query.get("direction", "desc") != "asc":
            found.reverse()
        page, number, last = page_numbers(found, request.query, 30, 100)
        return _paged([issue_json(_api_base(request), repo, i) for i in page], request.url, number, last)

    def get_issue(self, request: ApiRequest) -> ApiAnswer:
        repo = self._repository(request)
        number = str(request.path_params["number"])
        if repo is None or not number.isdigit():
            return self.not_found(request)
        for issue in self.issues(repo.full_name):
            if issue.number == int(number):
                return ApiAnswer(issue_json(_api_base(request), repo, issue))
        return self.not_found(request)

    def create_issue(self, request: ApiRequest) -> ApiAnswer:
        """``POST /repos/{owner}/{repo}/issues``: ``title`` (required), ``body``, ``assignees``,
        ``labels``; 201 with the issue and its ``Location``. Needs the ``repo`` or
        ``public_repo`` scope."""
        repo = self._repository(request)
        if repo is None:
            return self.not_found(request)
        if not WRITE_SCOPES & set(request.owner.scopes):
            message = "Resource not accessible by integration"
            headers = {"X-Accepted-OAuth-Scopes": "public_repo, repo"}
            return ApiAnswer({"message": message, "documentation_url": DOCS, "status": "403"}, 403, headers)
        fields = request.json
        if not isinstance(fields, dict):
            return ApiAnswer(
                {"message": "Problems parsing JSON", "documentation_url": DOCS, "status": "400"}, 400
            )
        title = fields.get("title")
        if isinstance(title, int) and not isinstance(title, bool):
            title = str(title)
        if not isinstance(title, str) or not title.strip():
            return _invalid("title", "missing_field" if title is None else "invalid")
        body = fields.get("body")
        if body is not None and not isinstance(body, str):
            return _invalid("body", "invalid")
        issues = self.issues(repo.full_name)
        issue = Issue(
            number=len(issues) + 1,
            title=title,
            body=body,
            author=request.owner.login,
            assignees=[a for a in _strings(fields.get("assignees")) if LOGIN_PATTERN.match(a)],
            labels=_labels(fields.get("labels")),
            created=datetime.fromtimestamp(int(self.clock()), UTC),
        )
        issues.append(issue)
        created = issue_json(_api_base(request), repo, issue)
        return ApiAnswer(created, 201, {"Location": created["url"]})

    def _repository(self, request: ApiRequest) -> Repository | None:
        return self.repository(str(request.path_params["owner"]), str(request.path_params["repo"]))

    def _open_issues(self, repo: Repository) -> int:
        return sum(1 for issue in self._issues.get(repo.full_name.lower(), ()) if issue.state == "open")


def _api_base(request: ApiRequest) -> str:
    """The API base the request came in at (``http://127.0.0.1:8001/mockhub``)."""
    return request.url.split("?", 1)[0].removesuffix(request.path)


def _paged(body: list[dict[str, Any]], url: str, page: int, last: int) -> ApiAnswer:
    link = link_header(url, page, last)
    return ApiAnswer(body, 200, {"Link": link} if link else {})


def _invalid(name: str, code: str) -> ApiAnswer:
    body = {
        "message": "Validation Failed",
        "errors": [{"resource": "Issue", "code": code, "field": name}],
        "documentation_url": DOCS + "/issues/issues#create-an-issue",
        "status": "422",
    }
    return ApiAnswer(body, 422)


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _labels(value: object) -> list[str]:
    """Label names, given as strings or as ``{"name": ...}`` objects."""
    if not isinstance(value, list):
        return []
    names = [item.get("name") if isinstance(item, dict) else item for item in value]
    return [name for name in names if isinstance(name, str) and name]


def _selected(issue: Issue, query: Mapping[str, str], caller: str) -> bool:
    state = query.get("state", "open")
    if state != "all" and issue.state != state:
        return False
    assignee = query.get("assignee")
    if assignee == "none" and issue.assignees:
        return False
    if assignee == "*" and not issue.assignees:
        return False
    if assignee not in (None, "none", "*"):
        wanted = caller if assignee == "@me" else assignee
        if wanted.lower() not in {a.lower() for a in issue.assignees}:
            return False
    creator = query.get("creator")
    if creator is not None and creator.lower() != issue.author.lower():
        return False
    labels = {name.strip() for name in query.get("labels", "").split(",") if name.strip()}
    return labels <= set(issue.labels)
