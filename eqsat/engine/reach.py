"""Which rules can fire on a graph: a closure over the constructors a graph holds and rules make.

A rule matches only where every constructor its query names has a row. A constructor has rows only
if the graph holds it or the actions of a rule that can fire make it. So the rules that can fire
on a graph are the least fixpoint: start from the graph's constructors, keep adding the rules whose
query constructors are all present, and the constructors their actions name. Reading the egglog
text over-approximates (an action's constructor counts as made even under a condition), which only
declares a rule that never fires; it never leaves out one that could (``tests/test_engine.py``
checks that against declaring every rule, on the test and benchmark graphs).

A rule with a ``converse`` (a kernel's ``unlift``, whose converse is its ``fuse``) adds nothing to the
terms its converse made: both state the same equalities, over the same variables. So the constructors
such a rule needs count only when the graph holds them or some other rule makes them: a graph that
holds no fused kernel never runs the unlift rules, which would only re-state what each fusion stated.

Declaring a rule costs egglog about 0.7 ms and each declared rule slows every
saturation iteration, so ``eqsat.engine.engine.Engine`` declares only what this closure reaches.
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
