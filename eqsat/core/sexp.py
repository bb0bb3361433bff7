"""The one reader of egglog text: s-expressions as nested lists of atoms (strings, quotes kept).

``parse("(Get (QuantGroup x G dt) 0)")`` is ``["Get", ["QuantGroup", "x", "G", "dt"], "0"]``;
``show`` writes it back. ``is_var`` tells a pattern variable from a literal (a quoted string, a
number, a boolean). Nothing here knows any constructor.
"""

from __future__ import annotations

import re
from functools import cache

Sexp = str | list  # an atom or a list of s-expressions

_TOKEN = re.compile(r'\(|\)|"[^"]*"|[^\s()]+')
_LITERAL = re.compile(r"-?[0-9.e+-]+|true|false")


def parse(text: str) -> Sexp:
    """The first s-expression of ``text``."""
    stack: list[list[Sexp]] = [[]]
    for tok in _TOKEN.findall(text):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    return stack[0][0]


def show(e: Sexp) -> str:
    return f"({' '.join(map(show, e))})" if isinstance(e, list) else str(e)


def is_var(e: Sexp) -> bool:
    return isinstance(e, str) and _names_var(e)


@cache  # a pure function of an atom; rules and the catalog spell a few hundred
def _names_var(atom: str) -> bool:
    return not atom.startswith('"') and not _LITERAL.fullmatch(atom)


def calls(e: Sexp) -> list[list]:
    """Every list (call) inside ``e``, ``e`` itself first, outermost before innermost."""
    if not isinstance(e, list):
        return []
    out = [e]
    for a in e[1:]:
        out.extend(calls(a))
    return out
