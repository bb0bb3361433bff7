"""A rule is one line of data: a name, egglog query facts, egglog actions, and a numerics tag.

``rewrite(name, lhs, rhs)`` states ``lhs = rhs`` (the e-graph keeps both, so it is an equivalence,
not a replacement); ``rule(name, query, actions)`` is the general multi-fact form. ``numerics`` is
``exact`` (bit-identical results) or ``rounding`` (equal up to the rounding of an intermediate);
``Options.numerics`` selects which rules may run. ``converse`` names the rule that states the same
equalities the other way round (a kernel's ``fuse`` rule for its ``unlift``): on the terms that rule
made, this one has nothing to add (``eqsat.engine.reach`` uses it). ``chains``: the rule's firing makes
its own next match (one link of a chain an iteration, as the residual adds of a model's layers), so
saturation first runs it alone to a fixpoint, where an iteration costs little (``eqsat.engine.saturate``).
Rendering to egglog text (``eqsat.core.facts`` encodes the fact forms) is the only behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from eqsat.core.facts import encode_actions, encode_query
from eqsat.core.spec import Numerics


@dataclass(frozen=True)
class Rule:
    name: str
    query: tuple[str, ...]
    actions: tuple[str, ...]
    numerics: Numerics = "exact"
    family: str = ""
    converse: str = ""  # the rule stating the same equalities the other way (``eqsat.engine.reach``)
    chains: bool = False  # its firing makes its own next match: run alone to a fixpoint first

    def egglog(self, ruleset: str) -> str:
        """The egglog rule; its fact forms read and state the packed facts (``eqsat.core.facts``)."""
        try:
            return _rendered(self, ruleset)
        except TypeError:  # unhashable (a list where a tuple belongs): render it
            return _render(self, ruleset)


def _render(r: Rule, ruleset: str) -> str:
    return (f"(rule ({' '.join(encode_query(r.query))}) ({' '.join(encode_actions(r.actions))}) "
            f':ruleset {ruleset} :name "{r.name}")')


_rendered = cache(_render)  # a pure function of two immutable values (each engine and uuid() renders)


def rewrite(name: str, lhs: str, rhs: str, *when: str, numerics: Numerics = "exact",
            family: str = "") -> Rule:
    """``lhs = rhs`` when the side conditions ``when`` hold."""
    return Rule(name, (f"(= __lhs {lhs})", *when), (f"(union __lhs {rhs})",), numerics, family)


def rule(name: str, query: tuple[str, ...], actions: tuple[str, ...], numerics: Numerics = "exact",
         family: str = "", converse: str = "", chains: bool = False) -> Rule:
    return Rule(name, query, actions, numerics, family, converse, chains)
