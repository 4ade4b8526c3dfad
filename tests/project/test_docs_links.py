"""Every repository path and relative link the docs name exists, so a move or rename that forgets
a doc fails here instead of leaving the reader a dead reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
TOP_LEVEL = (
    "bench",
    "connect_routes",
    "deploy",
    "docs",
    "examples",
    "mcp_url_connect",
    "mock_providers",
    "scripts",
    "service",
    "tests",
    "token_store",
)
# A path into the repository: a top-level folder, then names; stops at what cannot be in a name
# (`service/ops/cli/keys.py: cmd_keys_rotate`, `tests/unit/test_x.py::test_y`, `docs/redis.md#cluster`).
REPO_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP_LEVEL) + r")/[\w./<>*{}-]*[\w/>*}])")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
# Files the deploy steps have the reader create (from an `.example` beside them).
CREATED_BY_THE_READER = {"deploy/mcp.env", "deploy/k8s/secret.yaml", "deploy/compose.override.yaml"}


def _prose(doc: Path) -> str:
    """The doc without its code blocks: those show commands and files of a reader's own project."""
    return CODE_BLOCK.sub("", doc.read_text(encoding="utf-8"))


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    return {_anchor(h) for h in HEADING.findall(_prose(doc))}


def _exists(path: str) -> bool:
    if any(c in path for c in "*<>{}") or "..." in path or path in CREATED_BY_THE_READER:
        return True  # a pattern or a placeholder, not one file
    if path.endswith("_"):  # a name prefix: `tests/security/test_`
        return any(ROOT.glob(f"{path}*"))
    return (ROOT / path.rstrip("/.")).exists()


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_repository_path_a_doc_names_exists(doc: Path) -> None:
    missing = sorted({p for p in REPO_PATH.findall(_prose(doc)) if not _exists(p)})
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_of_a_doc_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(doc)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto: ...: not in the repository
        file, _, anchor = target.partition("#")
        linked = (doc.parent / file).resolve() if file else doc
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to what does not exist: {broken}"


def test_the_checks_find_a_missing_path_and_a_missing_anchor(tmp_path: Path) -> None:
    assert REPO_PATH.findall("see `service/no_such_module.py: run` and tests/unit/x.py::t") == [
        "service/no_such_module.py",
        "tests/unit/x.py",
    ]
    assert not _exists("service/no_such_module.py")
    assert _exists("service/urls.py")
    assert _exists("tests/security/test_")
    assert not _exists("tests/security/no_such_prefix_")
    doc = tmp_path / "a.md"
    doc.write_text("# The `Store` API\n\n## Key rotation (online)\n")
    assert _anchors(doc) == {"the-store-api", "key-rotation-online"}
