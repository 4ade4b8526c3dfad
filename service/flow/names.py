"""Names a page shows to the user (an account, an MCP client): which characters draw nothing, and
what makes a name look like another.

Hand-written on `unicodedata`: the confusable-detection libraries compare scripts, so they miss
look-alikes within one script (`aIice` with an uppercase I), and Python's `unicodedata` has no
Script property, so a letter's script is the first word of its Unicode name (LATIN, CYRILLIC,
GREEK...), which is how those names are built.
"""

from __future__ import annotations

import re
import unicodedata

# Letters that draw nothing (UTS #39 lists them as restricted; Unicode gives Python no property
# for them): the Hangul fillers and the braille blank.
BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Control, format (zero-width, bidi), private-use, surrogate, unassigned, line and paragraph
# separators: none of them is a visible letter.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})


def is_blank(character: str) -> bool:
    """True for a character that shows as nothing or as a gap other than a plain space."""
    category = unicodedata.category(character)
    return (
        character in BLANK_LETTERS
        or category in _INVISIBLE_CATEGORIES
        or (category == "Zs" and character != " ")
    )


def code_point(character: str) -> str:
    """`U+0430 CYRILLIC SMALL LETTER A`."""
    return f"U+{ord(character):04X} {unicodedata.name(character, 'UNNAMED')}"


def _script(character: str) -> str:
    return unicodedata.name(character, "UNKNOWN").split(" ", 1)[0]


def lookalike_note(name: str) -> str | None:
    """Why `name` could pass for another name, naming the characters to look at; None when it
    is plain ASCII without an ambiguous letter.

    Flagged: letters of more than one script (`alice` with a Cyrillic U+0430 for its a), any
    letter outside ASCII (a whole name in one other script can copy a Latin one), and ASCII
    letters that read as others (`_ambiguous_in`: `aIice`, `ALlCE`, `a1ice`).
    """
    # mutant: names.lookalikes_flagged return None
    scripts = sorted({_script(c) for c in name if c.isalpha()})
    foreign = list(dict.fromkeys(c for c in name if not c.isascii()))
    if len(scripts) > 1:
        return f"mixes {' and '.join(s.title() for s in scripts)} letters: " + ", ".join(
            code_point(c) for c in foreign
        )
    if foreign:
        return "has letters outside ASCII: " + ", ".join(code_point(c) for c in foreign)
    ambiguous = [c for word in re.findall(r"[A-Za-z0-9]+", name) for c in _ambiguous_in(word)]
    if ambiguous:
        return "has letters that look like others: " + ", ".join(
            code_point(c) for c in dict.fromkeys(ambiguous)
        )
    return None


def _ambiguous_in(word: str) -> list[str]:
    """An I inside a word with lowercase letters (reads as l), an l in an otherwise uppercase word
    (reads as I), a 0 or 1 between letters (reads as O or l)."""
    lower = any(c.islower() for c in word.replace("l", ""))
    return [
        c
        for i, c in enumerate(word)
        if (c == "I" and i > 0 and lower)
        or (c == "l" and not lower and any(x.isupper() for x in word))
        or (c in "01" and 0 < i < len(word) - 1 and word[i - 1].isalpha() and word[i + 1].isalpha())
    ]
