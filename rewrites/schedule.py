"""Which rules run: every family in one ruleset, filtered by the numerics contract.

All rules live in a single egglog ruleset and run together each iteration, so their order in any
list is irrelevant (``tests/test_order.py`` shuffles it). ``rounding`` admits ``exact`` rules too.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from eqsat.rewrites import layout, lift, views
from eqsat.rewrites.kernels import catalog_rules

from eqsat.core.rule import Rule
from eqsat.core.spec import Numerics
from eqsat.kernels.catalog import FAMILIES, Catalog

ADMITS: dict[str, frozenset[str]] = {"exact": frozenset({"exact"}), "rounding": frozenset({"exact", "rounding"})}


def select(rules: Iterable[Rule], numerics: Numerics) -> tuple[Rule, ...]:
    if numerics not in ADMITS:
        raise ValueError(f"numerics must be 'exact' or 'rounding', got {numerics!r}")
    return tuple(r for r in rules if r.numerics in ADMITS[numerics])


def default_rules(catalog: Catalog, numerics: Numerics) -> tuple[Rule, ...]:
    """Every family's rules for ``catalog`` under ``numerics``; memoised (a pure function of two
    immutable values) when the catalog is hashable, as the built-in one is (a user's row may hold a list)."""
    try:
        return _default_rules(catalog, numerics)
    except TypeError:  # unhashable: build them
        return _build(catalog, numerics)


def _build(catalog: Catalog, numerics: Numerics) -> tuple[Rule, ...]:
    family_rules = (r for family in FAMILIES for r in getattr(family, "RULES", ()))
    return select((*views.RULES, *layout.RULES, *lift.RULES, *family_rules, *catalog_rules(catalog)), numerics)


_default_rules = cache(_build)  # a pure function of two immutable values
