"""token_store/backends/redis/scripts/: every Lua file is loaded by the Redis store and shipped in the
wheel."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from token_store.backends.redis import store as redis_store

ROOT = Path(__file__).resolve().parents[5]
SCRIPTS = Path(redis_store.__file__).parent / "scripts"


def test_every_script_file_is_loaded_by_the_store() -> None:
    source = Path(redis_store.__file__).read_text(encoding="utf-8")
    loaded = {
        name for call in re.findall(r"_lua\(([^)]*)\)", source) for name in re.findall(r'"(\w+)"', call)
    }
    on_disk = {path.stem for path in SCRIPTS.glob("*.lua")}
    assert loaded == on_disk


def test_the_package_data_ships_every_script() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["token_store.backends.redis"]
    unshipped = [
        p.name for p in SCRIPTS.glob("*.lua") if not any(fnmatch(f"scripts/{p.name}", g) for g in patterns)
    ]
    assert unshipped == []
    assert any(fnmatch("scripts/x.lua", g) for g in patterns)


def test_a_shared_function_comes_before_the_scripts_that_call_it() -> None:
    assert redis_store._OPEN_ELICITATION.index(
        "local function transition("
    ) < redis_store._OPEN_ELICITATION.index("transition(3)")
    assert redis_store._REPLACE_CONNECTION.startswith(redis_store._lua("stored_value"))
