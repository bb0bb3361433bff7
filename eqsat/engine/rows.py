"""The rows egglog reads a graph from (``eqsat.engine.engine``): one row per imported term, with its facts.

Most terms share one input relation, ``in-term``: FX node index, constructor name, arguments in typed
slots (``SLOTS`` per sort; a tensor argument is its node index, an unused slot its sort's filler) and
the node's facts (``has``, dtype, shape key, the rest packed as in ``eqsat.core.facts``), so a graph
is one file and one ``input`` command. A constructor whose arguments do not fit the slots keeps a
relation ``in-C`` of its own, its facts in a ``tensor`` row. A ``Leaf``'s row holds its facts only.
Every rule reading a row is in the ``load`` ruleset, run once: a loader unions ``(Fx i)`` with
``(C (Fx j) ..)``, a fact rule sets ``(Fx i)``'s facts, and each deletes the rows it read, so input
relations are empty outside loading.

Invariant: a row holds no tab or newline and no string with surrounding blanks (egglog trims
fields), and its literals match the constructor's sorts; ``rows`` raises ``ValueError`` otherwise.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache

from eqsat.core.egraph import TensorFacts
from eqsat.core.facts import FACTS, pack
from eqsat.core.ir import FX, LEAF
from eqsat.fx.importer import Arg, Imported

SHARED = "in-term"
TENSOR = "tensor"  # the facts of a wide constructor's term: i, dtype, shape key, packed rest
SLOTS = {"T": 4, "i64": 3, "f64": 2, "String": 2}
FILLER = {"T": "0", "i64": "0", "f64": "0.0", "String": "-"}
_SLOT_SORT = {"T": "i64", "i64": "i64", "f64": "f64", "String": "String"}  # a tensor slot holds a node index
_PREFIX = {"T": "t", "i64": "n", "f64": "f", "String": "s"}
_VARS = ["i", "op", *(f"{_PREFIX[s]}{k}" for s, n in SLOTS.items() for k in range(n)), "has", "dt", "sh", "p"]
_FACT_SORTS = ("String", "String", "i64")  # dtype, shape key, the packed rest (eqsat.core.facts.pack)
_FACT_FILLER = "\t".join(["0", "-", "-", "0"])  # has 0, then fillers
_SLOT_FILLERS = [FILLER[s] for s, n in SLOTS.items() for _ in range(n)]


@lru_cache(maxsize=1024)
def slots(sorts: tuple[str, ...]) -> tuple[int, ...] | None:
    """The shared relation's column of each argument of a constructor of ``sorts``, or None when
    they do not fit its slots (a pure function of the sorts, memoised: every graph asks it again)."""
    used: Counter[str] = Counter()
    columns = []
    for s in sorts:
        if used[s] >= SLOTS.get(s, 0):
            return None
        columns.append(_VARS.index(f"{_PREFIX[s]}{used[s]}"))
        used[s] += 1
    return tuple(columns)


def _fact_rule(row: str) -> str:
    """The rule that states node ``i``'s facts from an input ``row`` binding ``i dt sh p`` (the dtype,
    the shape key and the packed rest: ``eqsat.core.facts``), and deletes the row."""
    return (f"(rule ({row}) ((set (dtype ({FX} i)) dt) (set (shape ({FX} i)) sh) (set ({FACTS} ({FX} i)) p) "
            f"(delete {row})) :ruleset load)")


def shared_schema() -> list[str]:
    """The shared relation and the rule that spreads its facts (the loaders delete the rest of its rows)."""
    sorts = ["i64", "String", *(_SLOT_SORT[s] for s, n in SLOTS.items() for _ in range(n)), "i64", *_FACT_SORTS]
    stated = _VARS[:_VARS.index("has")]  # the columns before the facts: a row with facts has has = 1
    return [f"(relation {SHARED} ({' '.join(sorts)}))", _fact_rule(f"({SHARED} {' '.join(stated)} 1 dt sh p)")]


def tensor_schema() -> list[str]:
    """The relation of wide constructors' facts and its rule: declared with the first wide loader."""
    return [f"(relation {TENSOR} (i64 {' '.join(_FACT_SORTS)}))", _fact_rule(f"({TENSOR} i dt sh p)")]


def loader(name: str, sorts: tuple[str, ...]) -> list[str]:
    """The rule that builds constructor ``name``'s terms from their rows (and, when its arguments do
    not fit the shared relation, that relation of its own)."""
    columns = slots(sorts)
    if columns is not None:
        names, schema = [_VARS[c] for c in columns], []
        row = f"({SHARED} i \"{name}\" {' '.join(_VARS[2:])})"
    else:
        names = [f"a{k}" for k in range(len(sorts))]
        row = f"(in-{name} i {' '.join(names)})"
        schema = [f"(relation in-{name} ({' '.join(['i64', *('i64' if s == 'T' else s for s in sorts)])}))"]
    kids = [f"({FX} {v})" if s == "T" else v for v, s in zip(names, sorts, strict=True)]
    return [*schema, f"(rule ({row}) ((union ({FX} i) ({name} {' '.join(kids)})) (delete {row})) "
                     f":ruleset load :name \"load-{name}\")"]


def _field(v: object, sort: str) -> str:
    if sort == "T":
        if not isinstance(v, Arg):
            raise ValueError(f"a tensor argument must be another node's term, got {v!r}")
        return str(v.node)
    if sort == "i64" and isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if sort == "f64" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(float(v)) if math.isfinite(v) else str(float(v))
    if sort == "String" and isinstance(v, str) and v == v.strip() and "\t" not in v and "\n" not in v \
            and "\r" not in v:
        return v
    raise ValueError(f"cannot load {type(v).__name__} {v!r} as egglog {sort}")


@lru_cache(maxsize=4096)
def _facts(f: TensorFacts) -> str:
    """The dtype, the shape key and the packed ndim, last dim (-1: symbolic) and contiguity,
    tab-separated (memoised: a model's graphs repeat a few shapes)."""
    last = f.shape[-1] if f.shape and isinstance(f.shape[-1], int) else -1
    shape = _field(",".join(map(str, f.shape)), "String")
    return f"{_field(f.dtype, 'String')}\t{shape}\t{pack(len(f.shape), last, f.contiguous)}"


def rows(imported: Imported, constructors: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """Input relation -> its rows (tab-separated lines) for ``imported``'s terms and facts."""
    out: dict[str, list[str]] = {}
    shared: list[str] = []
    layout: dict[str, tuple[tuple[str, ...], tuple[int, ...] | None]] = {}
    for i, (op, args) in imported.terms.items():
        facts = imported.facts.get(i)
        stated = f"1\t{_facts(facts)}" if facts is not None else _FACT_FILLER  # a shared row's facts
        if op == LEAF:  # no loader reads it (its class is (Fx i), eqsat.core.ir): the row states its facts only
            if facts is not None:
                shared.append("\t".join([str(i), op, *_SLOT_FILLERS, stated]))
            continue
        got = layout.get(op)
        if got is None:
            sorts = constructors.get(op, ())
            got = layout[op] = (sorts, slots(sorts) if op in constructors else None)
        sorts, columns = got
        if op not in constructors or len(args) != len(sorts):
            raise ValueError(f"node {i}: {op} with {len(args)} argument(s) is not a declared constructor")
        fields = [_field(a, s) for a, s in zip(args, sorts, strict=True)]
        if columns is None:
            out.setdefault(f"in-{op}", []).append("\t".join([str(i), *fields]))
            if facts is not None:
                out.setdefault(TENSOR, []).append(f"{i}\t{_facts(facts)}")
            continue
        row = [str(i), op, *_SLOT_FILLERS]
        for c, text in zip(columns, fields, strict=True):
            row[c] = text
        row.append(stated)
        shared.append("\t".join(row))
    if shared:
        out[SHARED] = shared
    return out
