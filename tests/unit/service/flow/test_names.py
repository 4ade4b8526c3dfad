"""service/flow/names.py: which characters draw nothing, and which names get a look-alike note."""

from __future__ import annotations

import pytest

from service.flow.names import code_point, is_blank, lookalike_note


@pytest.mark.parametrize(
    "name",
    ["alice", "bob", "mallory", "Alice", "ALICE", "Ian", "alice1", "erin.o_neil@example", "Claude Desktop"],
)
def test_plain_names_get_no_note(name: str) -> None:
    assert lookalike_note(name) is None


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("aIice", "U+0049 LATIN CAPITAL LETTER I"),
        ("ALlCE", "U+006C LATIN SMALL LETTER L"),
        ("a1ice", "U+0031 DIGIT ONE"),
        ("b0b", "U+0030 DIGIT ZERO"),
        ("\u0430lice", "U+0430 CYRILLIC SMALL LETTER A"),
        ("\u0391lice", "U+0391 GREEK CAPITAL LETTER ALPHA"),
        ("\u0430\u0441\u0435", "U+0430 CYRILLIC SMALL LETTER A"),
        ("caf\u00e9", "U+00E9 LATIN SMALL LETTER E WITH ACUTE"),
    ],
)
def test_lookalike_names_name_the_characters_to_look_at(name: str, named: str) -> None:
    note = lookalike_note(name)
    assert note is not None and named in note


def test_mixed_scripts_are_named() -> None:
    assert lookalike_note("\u0430lice") == "mixes Cyrillic and Latin letters: U+0430 CYRILLIC SMALL LETTER A"


def test_blank_characters() -> None:
    assert not any(is_blank(c) for c in "alice Claude-1.0 \u0430\u00e9")
    assert all(
        is_blank(c) for c in "\u3164\u2800\u115f\u1160\uffa0\u200b\u200d\u2060\ufeff\u00a0\u2028\t\u202e"
    )
    assert code_point("\u3164") == "U+3164 HANGUL FILLER"
