"""Which rules can fire on a graph: a closure over the constructors and literals a graph holds and rules make.

A rule matches only where every constructor its query names has a row, and a constructor has rows
only if the graph holds it or a rule that can fire makes it: the rules that can fire are the least
fixpoint from the graph's constructors. Reading the egglog text over-approximates (an action's
constructor counts as made even under a condition), which may declare a rule that never fires but
never leaves out one that could (``tests/test_engine.py`` checks this).

Literals count too, in the slots they are read from: a String or f64 argument of a constructor, or a
value's dtype. A query that reads a literal in a slot (written in an atom, or a variable there pinned
by ``(= v literal)``) matches only if some row holds it there, so the three fp8 forms of one lift are
not all reached by a graph of one form. A slot's values are the graph's, the literals rules' actions
write there, and what flows in from the slot a query variable was bound in; an action writing anything
else there (a primitive's result, an unbound variable) makes the slot hold any value.

A rule with a ``converse`` (a kernel's ``unlift``, converse of its ``fuse``) adds nothing to terms its
converse made, so its constructors count only when the graph holds them or another rule makes them:
a graph with no fused kernel never runs the unlift rules.

The same closure, given the rules that have matched so far, counts only their actions: the rules that
can match next. Declaring a rule has a cost and every declared rule slows every saturation iteration,
so ``eqsat.engine.engine.Engine`` declares only those, and more as rules match (a lift's check stage
once its match stage has matched, a fusion once a lift made its kernel's terms).

A staged rule's two stages (``eqsat.engine.staging``) are read off the rule's query, read once.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from eqsat.core.rule import Rule
from eqsat.core.sexp import Sexp, calls, is_var, parse
from eqsat.engine.staging import WITNESS, FlatQuery, held_by_witness, tables

DTYPE: Slot = ("dtype", -1)
"""The slot of a value's dtype fact (a constructor's slot is its name and an argument's position)."""

Slot = tuple[str, int]
Literal = tuple[Slot, object]  # a slot and a value in it (a str, or a float for an f64 slot)
_KINDS = ("String", "f64")


def _calls(texts: Iterable[str]) -> list[list]:
    return [c for t in texts for c in calls(parse(t))]


def value(text: str, sort: str) -> object | None:
    """An egglog literal of ``sort`` as the value a row holds (None if it is not one)."""
    if sort == "String":
        return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else None
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class Literals:
    """What one rule's query reads and its actions write in the literal slots."""

    wants: frozenset[Literal] = frozenset()  # a row must hold each for the query to match
    writes: frozenset[Literal] = frozenset()
    flows: frozenset[tuple[Slot, Slot]] = frozenset()  # (from, to): a value bound in one slot written in another
    any: frozenset[Slot] = frozenset()  # slots written with values not known here

    @classmethod
    def read(cls, flat: FlatQuery, actions: Sequence[list], sorts: Mapping[str, tuple[str, ...]],
             held: Collection[str] = ()) -> Literals:
        """Of a rule whose query reads as ``flat`` and whose actions make the calls ``actions``; without
        the atoms ``held`` (``flat.tables``' text: a staged rule's check stage does not join them)."""
        pinned = flat.pins
        bound: dict[str, tuple[Slot, str]] = {}
        wants: set[Literal] = set()

        def read(slot: Slot, sort: str, arg: Sexp) -> None:
            text = pinned.get(arg, arg) if isinstance(arg, str) else None
            if isinstance(arg, str) and is_var(arg):
                bound.setdefault(arg, (slot, sort))
            if text is not None and not is_var(text):
                v = value(text, sort)
                if v is not None:
                    wants.add((slot, v))

        for text, (out, head, args) in zip(flat.tables, flat.atoms, strict=True):
            if text in held:
                continue
            if head == "dtype":
                read(DTYPE, "String", out)
            for k, (sort, arg) in enumerate(zip(sorts.get(head, ()), args, strict=False)):
                if sort in _KINDS:
                    read((head, k), sort, arg)
        writes: set[Literal] = set()
        flows: set[tuple[Slot, Slot]] = set()
        anything: set[Slot] = set()

        def write(slot: Slot, sort: str, arg: Sexp) -> None:
            if isinstance(arg, list) and arg[0] == "dtype" and sort == "String":  # a value's dtype
                flows.add((DTYPE, slot))
            elif isinstance(arg, list):  # a primitive's result
                anything.add(slot)
            elif arg in pinned or not is_var(arg):
                v = value(pinned.get(arg, arg), sort)
                if v is None:
                    anything.add(slot)
                else:
                    writes.add((slot, v))
            elif arg in bound:
                flows.add((bound[arg][0], slot))
            else:
                anything.add(slot)

        for call in actions:
            if call[0] == "set" and isinstance(call[1], list) and call[1][0] == "dtype":
                write(DTYPE, "String", call[2])
            for k, (sort, arg) in enumerate(zip(sorts.get(call[0], ()), call[1:], strict=False)):
                if sort in _KINDS:
                    write((call[0], k), sort, arg)
        return cls(frozenset(wants), frozenset(writes), frozenset(flows), frozenset(anything))


def graph_literals(terms: Iterable[tuple[str, Sequence[object]]], dtypes: Iterable[str],
                   sorts: Mapping[str, tuple[str, ...]], slots: Collection[Slot]) -> frozenset[Literal]:
    """The literals a graph's rows hold in ``slots`` (the ones some rule reads): its terms' String and
    f64 arguments and its values' dtypes."""
    out: set[Literal] = {(DTYPE, d) for d in dtypes} if DTYPE in slots else set()
    for op, args in terms:
        for k, sort in enumerate(sorts.get(op, ())):
            if sort in _KINDS and (op, k) in slots and k < len(args):
                a = args[k]
                out.add(((op, k), float(a) if sort == "f64" and isinstance(a, (int, float)) else a))
    return frozenset(out)


@dataclass(frozen=True)
class Reach:
    """Each rule's query constructors (``needs``) and action constructors (``makes``), and its literals."""

    rules: tuple[Rule, ...]
    needs: tuple[frozenset[str], ...]
    makes: tuple[frozenset[str], ...]
    converse: tuple[int | None, ...]  # the index of each rule's converse rule, if it has one
    literals: tuple[Literals, ...] = ()

    @classmethod
    def of(cls, rules: Sequence[Rule], constructors: Mapping[str, tuple[str, ...]],
           stages: Mapping[str, tuple[Rule, ...]] | None = None, flats: Sequence[FlatQuery] | None = None) -> Reach:
        """Reach over ``rules`` or, given ``stages`` (each rule's, by name: ``eqsat.engine.staging.stage``),
        over their stages in order, each read off its rule: a match stage needs the rule's constructors
        and its literals outside the facts, and makes the witness of the rule's name; the check stage
        needs that witness and what it reads besides (``staging.held_by_witness``). ``flats``: each rule's query read over ``tables(constructors)``, if it has been."""
        known = tables(constructors)
        read: list[tuple[Rule, frozenset[str], frozenset[str], Literals]] = []
        for k, r in enumerate(rules):
            flat = flats[k] if flats is not None else FlatQuery(r.query, known)
            acts = _calls(r.actions)
            needs = frozenset(h for _, h, _ in flat.atoms if h in constructors)
            makes = frozenset(c[0] for c in acts if isinstance(c[0], str) and c[0] in constructors)
            lit = Literals.read(flat, acts, constructors)
            parts = stages.get(r.name, (r,)) if stages is not None else (r,)
            if len(parts) == 1:
                read.append((parts[0], needs, makes, lit))
                continue
            match, check = parts
            named = ((WITNESS, 0), r.name)
            read.append((match, needs, frozenset({WITNESS}),
                         Literals(frozenset(w for w in lit.wants if w[0] != DTYPE), frozenset({named}))))
            held = held_by_witness(flat)  # what the check stage does not join again (staging.stage)
            rereads = frozenset(h for t, (_, h, _) in zip(flat.tables, flat.atoms, strict=True)
                                if h in constructors and t not in held)
            checked = Literals.read(flat, acts, constructors, held)
            read.append((check, rereads | {WITNESS}, makes, replace(checked, wants=checked.wants | {named})))
        index = {s.name: k for k, (s, *_) in enumerate(read)}
        return cls(tuple(s for s, *_ in read), tuple(n for _, n, _, _ in read), tuple(m for _, _, m, _ in read),
                   tuple(index.get(s.converse) if s.converse else None for s, *_ in read),
                   tuple(lit for *_, lit in read))

    @property
    def read_slots(self) -> frozenset[Slot]:
        """The slots a graph's literals matter in: those some rule's query reads a literal in, and those
        any rule's actions carry a value from into one of them (transitively)."""
        slots = {s for lit in self.literals for s, _ in lit.wants}
        flows = {f for lit in self.literals for f in lit.flows}
        grew = True
        while grew:
            new = {src for src, dst in flows if dst in slots} - slots
            slots |= new
            grew = bool(new)
        return frozenset(slots)

    def closure(self, present: Iterable[str], literals: Iterable[Literal] | None = None,
                fired: Collection[str] | None = None) -> tuple[Rule, ...]:
        """The rules that can fire on an e-graph holding ``present`` constructors and ``literals`` (None:
        any literal), in rule order. ``fired``: the names of the rules that have matched so far; given,
        only their actions add to what the e-graph holds (the rules that can match next), else every
        reached rule's do (the rules that can ever match)."""
        held = frozenset(present)
        have, on = set(held), [False] * len(self.rules)
        values: set[Literal] = set()
        at: dict[Slot, set[object]] = {}  # ``values`` by slot, for what flows between slots
        anything: set[Slot] = set() if literals is not None else {s for s, _ in self._wanted()}
        flows: set[tuple[Slot, Slot]] = set()
        makers: dict[str, list[int]] = {}  # constructor -> the rules whose actions count that make it

        def add(more: Iterable[Literal]) -> None:
            for s, v in more:
                values.add((s, v))
                at.setdefault(s, set()).add(v)

        add(literals or ())

        def act(i: int) -> None:
            lit = self.literals[i] if self.literals else Literals()
            have.update(self.makes[i])
            add(lit.writes)
            anything.update(lit.any)
            flows.update(lit.flows)
            for c in self.makes[i]:
                makers.setdefault(c, []).append(i)

        for i, r in enumerate(self.rules):
            if fired is not None and r.name in fired:
                act(i)
        grew = True
        while grew:
            grew = False
            for i, needs in enumerate(self.needs):
                if on[i] or not needs <= have:
                    continue
                lit = self.literals[i] if self.literals else Literals()
                if not all(s in anything or (s, v) in values for s, v in lit.wants):
                    continue
                other = self.converse[i]
                if other is not None and not all(c in held or any(k != other for k in makers.get(c, ()))
                                                 for c in needs):
                    continue
                on[i], grew = True, True
                if fired is None:
                    act(i)
            moved = True
            while moved:  # what flows between slots
                moved = False
                for src, dst in flows:
                    if src in anything and dst not in anything:
                        anything.add(dst)
                        moved = grew = True
                    new = at.get(src, set()) - at.get(dst, set())
                    if new:
                        add((dst, v) for v in new)
                        moved = grew = True
        return tuple(r for r, o in zip(self.rules, on, strict=True) if o)

    def _wanted(self) -> frozenset[Literal]:
        return frozenset(w for lit in self.literals for w in lit.wants)
