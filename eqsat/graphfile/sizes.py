"""Symbolic sizes in saved graphs (:mod:`eqsat.graphfile`): a size is an int or the text of its
sympy expression, restricted to sums of products of ints and symbol names.

``expr_text(size)`` writes a size (refusing what ``parse_terms`` cannot read back); ``parse_terms``
reads one into ``[(coefficient, [symbol, ...]), ...]`` with a small tokenizer and grammar, never
``eval`` or sympy's parser, so a file's text is only ever matched against the grammar.
"""

from __future__ import annotations

import re

import torch

from eqsat.graphfile.ops import NAME, GraphFileError

_TOKEN = re.compile(r"\s*(\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*|[+\-*])")


def expr_text(value: torch.SymInt | int) -> str | int:
    """A size as JSON: an int, or its expression when symbolic (checked to parse back)."""
    if isinstance(value, int):
        return value
    text = str(value.node.expr)
    try:
        parse_terms(text)
    except GraphFileError:
        raise GraphFileError(f"symbolic size {text!r} is not a sum of products of ints and s<N> symbols; "
                             "it cannot be saved") from None
    return text


def parse_terms(text: str) -> list[tuple[int, list[str]]]:
    """``"2*s0**2 - s1 + 7"`` -> ``[(2, ["s0", "s0"]), (-1, ["s1"]), (7, [])]``; no eval.

    Grammar: ``expr := ["-"] term (("+" | "-") term)*``, ``term := factor ("*" factor)*``,
    ``factor := INT | NAME ["**" INT]``."""
    tokens: list[str] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise GraphFileError(f"bad size expression {text!r}")
        tokens.append(m.group(1))
        pos = m.end()
    tokens.append("")

    def bad() -> GraphFileError:
        return GraphFileError(f"bad size expression {text!r}")

    terms: list[tuple[int, list[str]]] = []
    i, sign = 0, 1
    if tokens[0] == "-":
        i, sign = 1, -1
    while True:
        coeff, names = sign, []
        while True:
            tok = tokens[i]
            if tok.isdigit():
                coeff, i = coeff * int(tok), i + 1
            elif NAME.fullmatch(tok):
                power, i = 1, i + 1
                if tokens[i] == "**":
                    if not tokens[i + 1].isdigit():
                        raise bad()
                    power, i = int(tokens[i + 1]), i + 2
                names += [tok] * power
            else:
                raise bad()
            if tokens[i] != "*":
                break
            i += 1
        terms.append((coeff, names))
        if tokens[i] == "":
            return terms
        if tokens[i] not in ("+", "-"):
            raise bad()
        sign, i = (1 if tokens[i] == "+" else -1), i + 1
