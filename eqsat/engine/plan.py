"""An engine's plan: what an :class:`~eqsat.engine.engine.Engine` made for a catalog and a rule list
knows before it declares anything, worked out once per process for each such pair.

The constructors (the fixed ones, the catalog's rows and staging's ``Witness``), each rule's stages
(``eqsat.engine.staging``), what the staged rules need and make (``eqsat.engine.reach``) and
which queries are not one piece (``eqsat.engine.repeats``) are pure
functions of the catalog and the rules, two immutable values: the engines of one process made for the
same pair (a pass's, each ``optimize`` without one, the tools') share one plan, whose tables are
read-only. A catalog or rule that cannot be hashed (a row holding a list) gets a plan of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from eqsat.core.ir import FIXED_CONSTRUCTORS
from eqsat.core.rule import Rule
from eqsat.engine.reach import Reach
from eqsat.engine.repeats import connected
from eqsat.engine.staging import WITNESS, WITNESS_SORTS, FlatQuery, stage, tables
from eqsat.kernels.catalog import Catalog


def constructors(catalog: Catalog) -> dict[str, tuple[str, ...]]:
    """Every constructor an engine for ``catalog`` knows, with its argument sorts: the fixed ones, the
    catalog's rows and staging's ``Witness`` (``eqsat.engine.staging``)."""
    table = {**FIXED_CONSTRUCTORS, WITNESS: WITNESS_SORTS}
    for spec in catalog:
        if spec.name in table:
            raise ValueError(f"catalog entry {spec.name!r} clashes with a built-in constructor")
        table[spec.name] = spec.egglog_sorts()
    return table


@dataclass(frozen=True)
class Plan:
    """What an engine for one catalog and one rule list knows before it declares anything."""

    constructors: Mapping[str, tuple[str, ...]]  # see ``constructors``
    stages: Mapping[str, tuple[Rule, ...]]  # a given rule's name -> its stages (itself when acyclic)
    rules: tuple[Rule, ...]  # what egglog runs: every given rule's stages, in order
    reach: Reach  # over ``rules``
    disconnected: tuple[str, ...]  # given rules whose query is not one piece (``eqsat.engine.repeats``)


def _plan(catalog: Catalog, rules: tuple[Rule, ...]) -> Plan:
    table = constructors(catalog)
    known = tables(table)
    flats = [FlatQuery(r.query, known) for r in rules]  # each query read once, for staging and reach
    staged = [stage(r, table, f) for r, f in zip(rules, flats, strict=True)]
    ordered = tuple(s for pair in staged for s in pair)
    stages = {r.name: s for r, s in zip(rules, staged, strict=True)}
    return Plan(MappingProxyType(table), MappingProxyType(stages), ordered, Reach.of(rules, table, stages, flats),
                tuple(r.name for r, f in zip(rules, flats, strict=True) if not connected(f)))


_planned = cache(_plan)  # a pure function of two immutable values


def plan(catalog: Catalog, rules: Sequence[Rule]) -> Plan:
    """The plan of an engine for ``catalog`` and ``rules`` (see the module docstring)."""
    given = tuple(rules)
    try:
        return _planned(catalog, given)
    except TypeError:  # unhashable: work it out
        return _plan(catalog, given)
