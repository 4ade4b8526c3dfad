"""mock_providers/api/pagination.py: GitHub's page numbers and Link header (RFC 8288), and the
opaque continuation tokens of Google and Slack."""

from __future__ import annotations

from mock_providers.api.pagination import continuation, continued_from, int_param, link_header, page_numbers

URL = "http://127.0.0.1:8001/mockhub/user/repos?per_page=100&sort=created&page=2"


def test_pages_of_a_list() -> None:
    items = list(range(250))
    page, number, last = page_numbers(items, {"per_page": "100", "page": "3"}, 30, 100)
    assert (page, number, last) == (list(range(200, 250)), 3, 3)
    assert page_numbers(items, {"per_page": "500"}, 30, 100)[0] == list(range(100))  # capped
    assert page_numbers(items, {"page": "x"}, 30, 100)[1] == 1  # malformed: the default
    assert page_numbers([], {}, 30, 100) == ([], 1, 1)
    assert int_param({"limit": "0"}, "limit", 100, 1, 1000) == 1


def test_link_header_names_the_neighbouring_pages_with_the_other_parameters() -> None:
    link = link_header(URL, 2, 3)
    assert link == (
        '<http://127.0.0.1:8001/mockhub/user/repos?per_page=100&sort=created&page=1>; rel="prev", '
        '<http://127.0.0.1:8001/mockhub/user/repos?per_page=100&sort=created&page=3>; rel="next", '
        '<http://127.0.0.1:8001/mockhub/user/repos?per_page=100&sort=created&page=3>; rel="last", '
        '<http://127.0.0.1:8001/mockhub/user/repos?per_page=100&sort=created&page=1>; rel="first"'
    )
    assert link_header(URL, 3, 3) is not None and 'rel="next"' not in (link_header(URL, 3, 3) or "")
    assert link_header(URL, 1, 1) is None


def test_a_continuation_token_is_only_read_back_by_its_own_kind() -> None:
    token = continuation("drive", 200)
    assert continued_from("drive", token) == 200
    assert continued_from("channels", token) is None
    assert continued_from("drive", "not a token") is None
    assert continued_from("drive", continuation("drive", 0)[:-2]) is None
