"""Which rules can fire on a graph: a closure over the constructors a graph holds and rules make.

A rule matches only where every constructor its query names has a row, and a constructor has rows
only if the graph holds it or a rule that can fire makes it: the rules that can fire are the least
fixpoint from the graph's constructors. Reading the egglog text over-approximates (an action's
constructor counts as made even under a condition), which may declare a rule that never fires but
never leaves out one that could (``tests/test_engine.py`` checks this).

A rule with a ``converse`` (a kernel's ``unlift``, converse of its ``fuse``) adds nothing to terms its
converse made, so its constructors count only when the graph holds them or another rule makes them:
a graph with no fused kernel never runs the unlift rules.

Declaring a rule has a cost and every declared rule slows every saturation iteration, so
``eqsat.engine.engine.Engine`` declares only what this closure reaches.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from eqsat.core.rule import Rule
from eqsat.core.sexp import calls, parse


def heads(texts: Iterable[str], constructors: Collection[str]) -> frozenset[str]:
    """The constructors applied anywhere in ``texts`` (egglog terms)."""
    return frozenset(c[0] for t in texts for c in calls(parse(t)) if isinstance(c[0], str) and c[0] in constructors)


@dataclass(frozen=True)
class Reach:
    """Each rule's query constructors (``needs``) and action constructors (``makes``)."""

    rules: tuple[Rule, ...]
    needs: tuple[frozenset[str], ...]
    makes: tuple[frozenset[str], ...]
    converse: tuple[int | None, ...]  # the index of each rule's converse rule, if it has one

    @classmethod
    def of(cls, rules: Sequence[Rule], constructors: Mapping[str, object]) -> Reach:
        index = {r.name: k for k, r in enumerate(rules)}
        return cls(tuple(rules), tuple(heads(r.query, constructors) for r in rules),
                   tuple(heads(r.actions, constructors) for r in rules),
                   tuple(index.get(r.converse) if r.converse else None for r in rules))

    def closure(self, present: Iterable[str]) -> tuple[Rule, ...]:
        """The rules that can fire on an e-graph holding ``present`` constructors, in rule order."""
        held = frozenset(present)
        have, on = set(held), [False] * len(self.rules)
        makers: dict[str, list[int]] = {}  # constructor -> the reached rules that make it
        grew = True
        while grew:
            grew = False
            for i, needs in enumerate(self.needs):
                if on[i] or not needs <= have:
                    continue
                other = self.converse[i]
                if other is not None and not all(c in held or any(k != other for k in makers.get(c, ()))
                                                 for c in needs):
                    continue
                on[i], grew = True, True
                have |= self.makes[i]
                for c in self.makes[i]:
                    makers.setdefault(c, []).append(i)
        return tuple(r for r, o in zip(self.rules, on, strict=True) if o)
