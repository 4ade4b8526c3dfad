"""scripts/mutation_check.py: markers found and checked against the table, and each operator's
mutant, on small trees of our own; then every check of the real table resolved on the real tree."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def script() -> Iterator[ModuleType]:
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "mutation_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = module  # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["mutation_check"]


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def mutant(script: ModuleType, root: Path, check_id: str) -> str:
    markers = [m for m in script.find_markers(root) if m.id == check_id]
    assert markers, f"no marker {check_id}"
    [(_original, mutated)] = script.mutated_files(root, markers).values()
    return str(mutated.decode())


# ---- validation --------------------------------------------------------------------------------


def test_the_validator_refuses_a_missing_a_duplicate_and_an_unknown_marker(
    script: ModuleType, tmp_path: Path
) -> None:
    root = tree(
        tmp_path,
        {
            "service/a.py": """\
                def f(x: int) -> int:
                    # mutant: twice
                    if x:
                        raise ValueError
                    # mutant: twice
                    if x > 1:
                        raise ValueError
                    # mutant: stray
                    if x > 2:
                        raise ValueError
                    return x
                """,
        },
    )
    markers = script.find_markers(root)
    table = (
        script.check("twice", ["t"], "r"),
        script.check("missing", ["t"], "r"),
        script.check("missing", ["t"], "r"),
    )
    problems = "\n".join(script.validate(table, markers))
    assert "twice: 2 marker(s) in the tree, the table wants 1" in problems
    assert "missing: 0 marker(s)" in problems
    assert "missing: twice in the table" in problems
    assert "marker 'stray' has no entry in the table" in problems
    # The same tree agrees with a table that names each marker as often as it occurs.
    assert (
        script.validate(
            (script.check("twice", ["t"], "r", markers=2), script.check("stray", ["t"], "r")), markers
        )
        == []
    )


def test_a_marker_names_its_line_and_function(script: ModuleType, tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "service/a.py": """\
                class Gate:
                    def admit(self, x: int) -> None:
                        # mutant: above
                        # mutant: stacked
                        if x:
                            raise ValueError
                        # mutant: over
                        print(x)  # mutant: trailing
                """,
            "deploy/site.conf": "server {\n    # mutant: conf\n    limit_conn perip 10;\n}\n",
        },
    )
    found = {m.id: (m.file, m.line, m.where, m.python) for m in script.find_markers(root)}
    assert found == {
        "above": ("service/a.py", 5, "Gate.admit", True),
        "stacked": ("service/a.py", 5, "Gate.admit", True),
        "over": ("service/a.py", 8, "Gate.admit", True),
        "trailing": ("service/a.py", 8, "Gate.admit", True),
        "conf": ("deploy/site.conf", 3, "", False),
    }


def test_an_operator_that_does_not_apply_is_refused_before_anything_is_written(
    script: ModuleType, tmp_path: Path
) -> None:
    source = """\
        def f(x: int) -> int:
            # mutant: gone "y > 1" -> "True"
            if x > 1:
                raise ValueError
            # mutant: odd frobnicate
            if x > 2:
                raise ValueError
            # mutant: assigned
            y = x + 1
            return y
        """
    root = tree(tmp_path, {"service/a.py": source})
    for check_id, message in [
        ("gone", "found 0 times"),
        ("odd", "unknown operator 'frobnicate'"),
        ("assigned", "no default operator for this assignment"),
    ]:
        markers = [m for m in script.find_markers(root) if m.id == check_id]
        with pytest.raises(script.TableError, match=message):
            script.mutated_files(root, markers)
    assert (root / "service/a.py").read_text() == textwrap.dedent(source)


# ---- operators on Python ------------------------------------------------------------------------

PYTHON_CASES = [
    # (the marked statement with its marker, the statement the mutant holds instead)
    ("# mutant: c\nif x > 1:\n    raise ValueError\n", "if False:\n    raise ValueError\n"),
    ("# mutant: c true\nif x is None:\n    pass\n", "if True:\n    pass\n"),
    ("while x > 1:  # mutant: c\n    x -= 1\n", "while False:  # mutant: c\n    x -= 1\n"),
    ("# mutant: c\ncheck(x)\n", "pass\n"),
    ("# mutant: c drop 1\nif x is None or x > 1:\n    raise ValueError\n", "if x is None:\n"),
    ("# mutant: c\nfor n in range(x):\n    print(n)\n", "for n in ():\n"),
    ("# mutant: c\nwith guard(x):\n    print(x)\n", "if True:\n    print(x)\n"),
    ("# mutant: c\nx = take(x)\n", None),  # an assignment needs a named operator
    ("# mutant: c unwrap\ny = wrap(x, 3)\n", "y = x\n"),
    ("# mutant: c unwrap or 0\ny = wrap(await f(x))\n", "y = (await f(x) or 0)\n"),
    ("# mutant: c none\ny = start(x)\n", "y = None\n"),
    ("# mutant: c return None\ny = start(x)\n", "return None\n"),
    ("# mutant: c peek\ny = cache.pop(x, None)\n", "y = cache.get(x, None)\n"),
    (
        '# mutant: c peek\ny = run("DELETE FROM t WHERE k = ? RETURNING a, b", x)\n',
        'run("SELECT a, b FROM t WHERE k = ?", x)',
    ),
    ('# mutant: c after "undo(x)"\ny = take(x)\n', "y = take(x)\nundo(x)\n"),
    ('# mutant: c before "undo(x)"\ny = take(x)\n', "undo(x)\ny = take(x)\n"),
    ('# mutant: c "x, 3" -> "x, 0"\ny = wrap(x, 3)\n', "y = wrap(x, 0)\n"),
    ('# mutant: c \\\n#   "wrap(" \\\n#   -> "unwrap("\ny = wrap(x, 3)\n', "y = unwrap(x, 3)\n"),
    ("y = (\n    x > 1\n    # mutant: c\n    and x < 9\n)\n", "y = (\n    x > 1\n)\n"),
    ("y = [\n    1,\n    # mutant: c\n    2,\n]\n", "y = [1]\n"),
    ("# mutant: c drop 0\ny = (x, 1, 2)\n", "y = (1, 2)\n"),
    ("# mutant: c\nKINDS = ('a', 'b')\n", "KINDS = ()\n"),
    ('# mutant: c\nSHAPE = re.compile(r"[a-z]+")\n', 'SHAPE = re.compile(r".*")\n'),
    ("# mutant: c orelse\ny = 'a' if x else 'b'\n", "y = 'b'\n"),
    ("y = dict(\n    # mutant: c false\n    secure=x > 1,\n)\n", "    secure=False,\n"),
]


@pytest.mark.parametrize(("statement", "expected"), PYTHON_CASES)
def test_each_python_operator_gives_its_mutant(
    script: ModuleType, tmp_path: Path, statement: str, expected: str | None
) -> None:
    body = textwrap.indent(statement, "    ")
    source = f"import re\n\n\nasync def f(x):\n{body}    return x\n"
    root = tree(tmp_path, {"service/a.py": source})
    if expected is None:
        with pytest.raises(script.TableError):
            mutant(script, root, "c")
        return
    text = mutant(script, root, "c")
    assert textwrap.indent(expected, "    ") in text or expected in text, text
    assert text != source


def test_a_return_of_a_check_returns_true_or_its_first_argument(script: ModuleType, tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "service/a.py": """\
                def allowed(x: int) -> bool:
                    # mutant: predicate
                    return x > 1


                class Escaper:
                    def escape(self, text: str) -> str:
                        # mutant: passthrough
                        return text.replace("\\n", " ")


                # mutant: entry
                def redact(text: str) -> str:
                    return text[:3]
                """
        },
    )
    assert "    return True\n" in mutant(script, root, "predicate")
    assert "        return text\n" in mutant(script, root, "passthrough")
    assert "def redact(text: str) -> str:\n    return text\n    return text[:3]\n" in mutant(
        script, root, "entry"
    )


def test_two_markers_of_one_check_mutate_together(script: ModuleType, tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "service/a.py": """\
                def same(a: object, b: object) -> bool:
                    return (
                        a is not None
                        # mutant: both
                        and isinstance(b, str)
                        # mutant: both
                        and a == b
                    )
                """
        },
    )
    assert "return (\n        a is not None\n    )" in mutant(script, root, "both")


# ---- operators on lines of text (configuration, Lua in a Python string) ------------------------


def test_text_operators(script: ModuleType, tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "deploy/site.conf": """\
                http {
                    # mutant: line
                    limit_conn perip 10;
                    # mutant: block
                    location = /metrics {
                        return 404;
                    }
                    # mutant: sub "2 6k" -> "4 8k"
                    large_client_header_buffers 2 6k;
                }
                """,
            "deploy/pod.yaml": """\
                spec:
                  # mutant: key
                  ports:
                    - port: 8000
                  # mutant: digest unpin
                  image: redis:7@sha256:%s
                  # mutant: added after "  extra: 1"
                  name: x
                """
            % ("0" * 64),
            "service/lua.py": '''\
                SCRIPT = """
                if not record then return {0} end
                -- mutant: swapped swap-up
                redis.call('SET', KEYS[2], ARGV[1])
                -- mutant: lua true
                if redis.call('GET', KEYS[1]) == ARGV[1] then
                  redis.call('DEL', KEYS[1])
                end
                -- mutant: lualine
                redis.call('DEL', KEYS[3])
                """
                ''',
        },
    )
    conf = mutant(script, root, "line")
    assert "limit_conn" not in conf and "location = /metrics" in conf
    block = mutant(script, root, "block")
    assert (
        "location = /metrics" not in block and "return 404" not in block and "limit_conn perip 10;" in block
    )
    assert "large_client_header_buffers 4 8k;" in mutant(script, root, "sub")
    pod = mutant(script, root, "key")
    assert "ports:" not in pod and "port: 8000" not in pod and "image: redis:7@sha256" in pod
    assert "  image: redis:7\n" in mutant(script, root, "digest")
    assert "  name: x\n  extra: 1\n" in mutant(script, root, "added")
    swapped = mutant(script, root, "swapped")
    assert swapped.index("redis.call('SET'") < swapped.index("if not record")
    assert "if true then\n" in mutant(script, root, "lua")
    assert "redis.call('DEL', KEYS[3])" not in mutant(script, root, "lualine")
    markers = {m.id: m for m in script.find_markers(root)}
    assert not markers["lua"].python and markers["lua"].where == "SCRIPT"


# ---- the real table on the real tree -------------------------------------------------------------


def test_list_resolves_every_check_of_the_table_on_the_real_tree(
    script: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert script.main(["--list"]) == 0
    listed = capsys.readouterr().out
    for check in script.CHECKS:
        assert f"{check.id} " in listed
    assert len(script.CHECKS) >= 140
    markers = script.find_markers(ROOT)
    assert script.validate(script.CHECKS, markers) == []
    # Every mutant differs from its file and compiles (mutated_files raises otherwise).
    for check in script.CHECKS:
        mine = [m for m in markers if m.id == check.id]
        for original, mutated in script.mutated_files(ROOT, mine).values():
            assert original != mutated


def test_only_selects_by_id_or_by_the_function_a_marker_sits_in(script: ModuleType) -> None:
    markers = script.find_markers(ROOT)
    first = script.CHECKS[0]
    function = next(m.where for m in markers if m.id == first.id).rsplit(".", 1)[-1]
    by_function = script.select([function], markers)
    assert first in by_function
    assert all(any(m.where.endswith(function) for m in markers if m.id == c.id) for c in by_function)
    assert script.select([first.id], markers) == [first]
    with pytest.raises(SystemExit):
        script.select(["no_such_check"], markers)
