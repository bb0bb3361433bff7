"""Load: imported terms and facts into the engine's e-graph, as rows egglog reads from files.

Terms enter as data, never as egglog actions (a rule of one ``let`` per term makes egglog type-check
and compile every term and keep binding objects for it; a program string is parsed in time
quadratic in its length). ``eqsat.engine.rows`` says what the
rows hold: each graph is one file of one shared relation (plus one per constructor too wide for it),
read by egglog's ``input`` command, and the ``load`` ruleset, run once, builds each node's term as
``(Fx i)`` (``Fx`` names node ``i``'s e-class while loading and is never extracted, ``eqsat.core.ir``),
sets its facts, and deletes the rows it read; a ``Leaf`` has no loader: its class is ``(Fx i)``
itself, which its facts or its readers make (``eqsat.core.ir``). The schema (sort ``T``, the fact
functions, the shared relation) is declared once per :class:`Engine`; a rule, a constructor and a
constructor's loader once, the first time a graph needs it (``eqsat.engine.reach``). What an engine knows
before it declares anything (constructors, staged rules, reach) is its plan, worked out once per process
for a catalog and a rule list (``eqsat.engine.plan``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from egglog import bindings as eb

from eqsat.core.egraph import TensorFacts
from eqsat.core.ir import LEAF, constructor, schema
from eqsat.core.rule import Rule
from eqsat.core.spelling import VocabIndex, Vocabulary
from eqsat.cost.roofline import CostMemo, Profile, Sizes, size_points
from eqsat.engine import rows as load_rows
from eqsat.engine.plan import plan
from eqsat.engine.reach import graph_literals
from eqsat.engine.rows import SHARED, TENSOR, rows, shared_schema, tensor_schema
from eqsat.engine.saturate import SizeBound
from eqsat.engine.staging import WITNESS
from eqsat.fx.importer import Imported
from eqsat.fx.output_layouts import OutputLayouts
from eqsat.fx.traces import Traces
from eqsat.kernels.catalog import Catalog

CLEAR = "clear"
NONE = "none"  # an empty ruleset: what a graph no rule can fire on runs
_SPAN = eb.RustSpan("eqsat", 0, 0)


def _scratch() -> Path:
    """A fresh private folder for the rows, in memory where Linux offers it (/dev/shm: a small file
    is written there much faster than on a disk-backed /tmp)."""
    shm = Path("/dev/shm")
    memory = shm.is_dir() and os.access(shm, os.W_OK)
    return Path(tempfile.mkdtemp(prefix="eqsat-load-", dir=shm if memory else None))


def _remove(folder: Path, open_files: dict[str, tuple[int, str]]) -> None:
    for fd, _ in open_files.values():
        os.close(fd)
    open_files.clear()
    shutil.rmtree(folder, True)


class RowFiles:
    """One file per input relation in a private folder, each kept open while its owner lives: a graph's
    rows overwrite the last graph's in place (``pwrite`` then ``ftruncate``: two system calls where
    opening, truncating and closing the file took four, and the file's memory pages stay allocated)."""

    def __init__(self) -> None:
        self.folder = _scratch()
        self._open: dict[str, tuple[int, str]] = {}  # relation -> its file's descriptor and path
        weakref.finalize(self, _remove, self.folder, self._open)

    def write(self, relation: str, lines: Sequence[str]) -> str:
        """Make ``relation``'s file hold ``lines`` (and nothing else); its path."""
        got = self._open.get(relation)
        if got is None:
            path = str(self.folder / f"{relation}.tsv")
            got = self._open[relation] = (os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), path)
        fd, path = got
        data = ("\n".join(lines) + "\n").encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        return path


class Engine:
    """An egglog e-graph with the schema and the catalog's dtype facts declared, and the rules
    declared as graphs need them.

    Declaring a rule has a cost (egglog compiles it) and every declared rule slows each
    saturation iteration, so a rule is declared the first time a graph can fire it
    (``eqsat.engine.reach``: its query's constructors are in the graph or made by rules that can fire;
    on demand, made by rules that have matched, saturation calling ``grow`` after each egglog call)
    and stays declared, in a ruleset of its own; a graph runs ``ruleset``, the rules it can fire
    combined (a declared rule its graph cannot fire is never run on it, so the rules an engine
    declared for other graphs cost a graph nothing). Loading a graph costs time per term: so one engine
    serves many graphs, each declared for (``declare_for``) and loaded inside ``scope()``, which afterwards deletes
    every row it added (ruleset ``clear``: one delete rule per table that can hold rows, cheaper
    than egglog's push/pop, which clones the whole e-graph), so the engine holds no
    row but ``dtype-ok``'s between graphs. ``serves`` says whether it was made for a given catalog
    and rule list. Kept across the graphs too: ``layouts``, the output layouts of the kernels emit wrote
    (``eqsat.fx.output_layouts.OutputLayouts``), so a kernel's fake value is computed once per layout; the
    traces of the functions emit inlined (``eqsat.fx.traces.Traces``), so each is traced once per key; and,
    through ``cost_memo``, the own costs of the e-nodes extraction has costed (``eqsat.cost.roofline.CostMemo``,
    by op, arguments and facts).
    """

    def __init__(self, catalog: Catalog, rules: Sequence[Rule]) -> None:
        self.catalog, self.given = catalog, tuple(rules)
        self._given = frozenset(self.given)  # `in` a tuple of rules compares them field by field
        known = plan(catalog, self.given)  # shared by the engines for this catalog and these rules
        self.constructors = dict(known.constructors)
        self.rules = known.rules  # what egglog runs (eqsat.engine.staging)
        self._stages = known.stages
        self.extractable = {c: s for c, s in self.constructors.items() if c != WITNESS}
        self.reach = known.reach
        self.separable = not known.disconnected  # every query one piece: repeats saturate once (eqsat.engine.repeats)
        self._rule_index = {r.name: k for k, r in enumerate(self.rules)}  # into reach.needs / reach.makes
        self.growth = {r.name: sum(a.count("(") for a in r.actions) for r in self.rules}
        self.fixed_rows = sum(len(s.dtypes) for s in catalog)  # dtype-ok
        self.declared: set[str] = set()  # rule names, loaders ("load-C"), TENSOR once a wide loader is
        self.known: set[str] = set()  # constructors declared: those a loaded graph or a declared rule names
        self.tables: set[str] = set()  # tables the clear ruleset empties
        self._closures: dict[tuple[frozenset[str], frozenset], tuple[Rule, ...]] = {}
        self._read_slots = self.reach.read_slots
        self._ready: Imported | None = None  # the graph declare_for last prepared
        self._graph: tuple[frozenset[str], frozenset] | None = None  # its constructors and literals
        self._fired: frozenset[str] | None = None  # the rules that matched on it, when declared on demand
        self.ruleset = NONE  # the rules the graph last prepared for can fire now, combined (see declare_for)
        self.running: frozenset[str] = frozenset()  # their names
        self.chains: str | None = None  # those of them that chain (``Rule.chains``), combined; None if none
        self._chaining = frozenset(r.name for r in self.rules if r.chains)
        self.run_every_declared = False  # run every declared rule on every graph (tests of reach's soundness)
        self._combined: dict[frozenset[str], str] = {frozenset(): NONE}  # rule names -> their ruleset
        self._vocab: VocabIndex | None = None  # see vocab_index
        self._costs: CostMemo | None = None  # see cost_memo
        self.layouts = OutputLayouts()
        self.traces = Traces()
        self.admissible: dict[tuple, tuple] = {}  # eqsat.admissible's choices, by op and facts
        # one TensorFacts object per layout across this engine's graphs (``serialize``): the memos keyed by
        # facts (costs, choices) then find a key by identity, without comparing fields
        self.facts: dict[TensorFacts, TensorFacts] = {}
        self.egraph = eb.EGraph()
        program = [schema(), *shared_schema(), f"(ruleset {NONE})", f"(ruleset {CLEAR})"]
        program += [f'(dtype-ok "{s.name}" "{d}")' for s in catalog for d in s.dtypes]
        self._declare(program)
        self._declare(self._clear({n: (len(f.input_sorts), f.output_sort == "Unit")
                                   for n, f in self.egraph.freeze().functions.items()
                                   if n not in self.constructors and n not in ("dtype-ok", SHARED)}))
        self.files = RowFiles()  # the input relations' rows
        self.parsed: dict[str, list] = {}  # saturation's run commands by text, parsed once (eqsat.engine.saturate)
        self._run_load = self.egraph.parse_program("(run load 1)")
        self._run_clear = self.egraph.parse_program(f"(run {CLEAR} 1)")

    def _declare(self, program: Sequence[str]) -> None:
        # one small parse per declaration: a parsed node's span holds its whole source text, so one big
        # program string costs time quadratic in its length
        self.egraph.run_program(*(c for text in program for c in self.egraph.parse_program(text)))

    def _clear(self, tables: dict[str, tuple[int, bool]]) -> list[str]:
        """Delete rules for those ``tables`` (name -> arity, is a relation) not covered yet."""
        lines = []
        for name, (arity, relation) in sorted(tables.items()):
            if name not in self.tables:
                call = f"({name} {' '.join(f'a{k}' for k in range(arity))})"
                lines.append(f"(rule ({call if relation else f'(= __o {call})'}) ((delete {call})) "
                             f':ruleset {CLEAR} :name "clear-{name}")')
                self.tables.add(name)
        return lines

    def size_bound(self, imported: Imported) -> SizeBound:
        """At most 3 rows a loaded term (its row, ``Fx``, its input row), 4 a value's facts (a
        ``tensor`` row and the three it is stored in, ``eqsat.core.facts``) and ``dtype-ok``'s; each match
        adds at most one row per application in the rule's actions."""
        return SizeBound(3 * len(imported.terms) + 4 * len(imported.facts) + self.fixed_rows, self.growth)

    def check_empty(self) -> None:
        """Raise unless every table but ``dtype-ok`` is empty (as between graphs)."""
        sizes = self.egraph.run_program(eb.PrintSize(_SPAN, None))[0].sizes
        left = {name: n for name, n in sizes if n and name != "dtype-ok"}
        if left:
            raise RuntimeError(f"rows left in the engine after a graph: {left}")

    def cost_memo(self, profile: Profile, sizes: Sizes) -> CostMemo:
        """The own costs kept for this engine's catalog at ``profile`` and ``sizes`` (a new memo when one
        differs from the last graph's): a pass's graphs share e-nodes."""
        if self._costs is None or not self._costs.serves(self.catalog, profile, size_points(sizes)):
            self._costs = CostMemo(self.catalog, profile, sizes)
        return self._costs

    def vocab_index(self, vocabularies: tuple[Vocabulary, ...]) -> VocabIndex:
        """The index of ``vocabularies``, kept while the same tuple is asked for (a pass reuses its
        engine and its options' vocabularies on every graph, and building the index is not free)."""
        if self._vocab is None or self._vocab.vocabularies is not vocabularies:
            self._vocab = VocabIndex(vocabularies)
        return self._vocab

    def serves(self, catalog: Catalog, rules: Sequence[Rule]) -> bool:
        return (self.catalog is catalog or self.catalog == catalog) and self.given == tuple(rules)

    def reachable(self, present: frozenset[str], literals: frozenset | None = None,
                  fired: frozenset[str] | None = None) -> tuple[Rule, ...]:
        """The rules that can fire on a graph of ``present`` constructors and ``literals``
        (``eqsat.engine.reach``; None: any literal), given those ``fired`` (None: any that can)."""
        key = (present, literals if literals is not None else frozenset({None}), fired)
        got = self._closures.get(key)
        if got is None:
            got = self._closures[key] = self.reach.closure(present, literals, fired)
        return got

    def declare(self, rules: Iterable[Rule] = (), ops: Iterable[str] = ()) -> None:
        """Declare those of ``rules`` (the engine's), and the loaders of those constructors ``ops``,
        not declared yet, with delete rules for every table they can fill."""
        rules = [s for r in rules for s in (self._stages.get(r.name, (r,)) if r in self._given else (r,))]
        new = [r for r in rules if r.name not in self.declared]
        foreign = [r.name for r in new if r.name not in self._rule_index]
        if foreign:
            raise ValueError(f"rules this engine was not made with: {foreign}")
        fresh = sorted({op for op in ops if op != LEAF and f"load-{op}" not in self.declared})  # see LEAF
        if not (new or fresh):
            return
        unknown = [op for op in fresh if op not in self.constructors]
        if unknown:
            raise ValueError(f"terms of undeclared constructors: {unknown}")
        index = [self._rule_index[r.name] for r in new]
        made = set(fresh).union(*(self.reach.makes[k] for k in index))
        filled = {c: (len(self.constructors[c]), False) for c in made}  # the loaders empty in-C themselves
        named = made.union(*(self.reach.needs[k] for k in index))
        wide = TENSOR not in self.declared and any(load_rows.slots(self.constructors[op]) is None for op in fresh)
        self.declare_constructors(named)
        own = [self._own(r.name) for r in new]
        self._declare([*(tensor_schema() if wide else ()),  # a wide constructor's facts come in rows of their own
                       *(line for op in fresh for line in load_rows.loader(op, self.constructors[op])),
                       *(f"(ruleset {name})\n{r.egglog(name)}" for r, name in zip(new, own, strict=True))])
        self._declare(self._clear(filled))
        self.declared.update([*(r.name for r in new), *(f"load-{op}" for op in fresh), *([TENSOR] if wide else [])])

    def declare_constructors(self, names: Iterable[str]) -> None:
        """Declare those constructors ``names`` not declared yet (``declare`` does, for what a graph
        and its rules name: each has a cost in egglog, so declaring all up front would tax every
        engine; ``eqsat.tools.explain``'s diagnostic rules name every fused row's terms). Rows appear
        in a constructor only through ``declare``'s loaders and rules, whose tables get delete rules."""
        kinds = sorted(set(names) - self.known)
        unknown = [c for c in kinds if c not in self.constructors]
        if unknown:
            raise ValueError(f"not constructors of this engine: {unknown}")
        self._declare([constructor(c, self.constructors[c]) for c in kinds])
        self.known.update(kinds)

    def declare_for(self, imported: Imported, on_demand: bool = False) -> tuple[Rule, ...]:
        """Declare what ``imported`` needs before it is loaded: its constructors' loaders and the rules
        it can fire (``on_demand``: only those that can match before any rule has, the rest as rules
        match, through ``grow``); return the rules it can ever fire."""
        present = frozenset(op for op, _ in imported.terms.values())
        literals = graph_literals(imported.terms.values(), (f.dtype for f in imported.facts.values()),
                                  self.constructors, self._read_slots)
        self._graph, self._fired = (present, literals), frozenset() if on_demand else None
        now = self.reachable(present, literals, self._fired)
        self.declare(now, present)
        self._run(now)
        self._ready = imported
        return self._can

    def grow(self, matched: Iterable[str]) -> str | None:
        """Declare the rules that rules ``matched`` (names) let match on the graph declared for on
        demand; the ruleset that runs them too, None when there is none new (saturation goes on while
        there is)."""
        if self._fired is None or self._graph is None:
            return None
        fired = self._fired.union(matched)
        if fired == self._fired:
            return None
        self._fired = frozenset(fired)
        now = self.reachable(*self._graph, self._fired)
        self.declare([r for r in now if r.name not in self.declared])
        return self._run(now) if not self.running.issuperset(r.name for r in now) else None

    @property
    def _can(self) -> tuple[Rule, ...]:
        """The rules the graph last prepared for can ever fire."""
        return self.reachable(*self._graph) if self._graph is not None else ()

    def _own(self, name: str) -> str:
        """The ruleset that holds rule ``name`` alone."""
        return f"r{self._rule_index[name]}"

    def _run(self, rules: Sequence[Rule]) -> str:
        """Make ``rules`` (declared), with those the graph can ever fire that are declared already (they
        cost nothing to declare, and running them saves calls), what ``ruleset`` runs; return its name."""
        names = frozenset(r.name for r in rules).union(r.name for r in self._can if r.name in self.declared)
        if self.run_every_declared:
            names = frozenset(n for n in self.declared if n in self._rule_index)
        chaining = names & self._chaining
        self.running, self.ruleset = names, self._combine(names)
        self.chains = self._combine(chaining) if chaining else None
        return self.ruleset

    def _combine(self, names: frozenset[str]) -> str:
        """The ruleset that runs the declared rules ``names`` (one egglog ruleset per set, made once)."""
        got = self._combined.get(names)
        if got is None:
            got = self._combined[names] = f"g{len(self._combined)}"
            members = " ".join(self._own(n) for n in sorted(names, key=self._rule_index.__getitem__))
            self._declare([f"(unstable-combined-ruleset {got} {members})"])
        return got

    @contextmanager
    def scope(self) -> Iterator[eb.EGraph]:
        """The e-graph; every row added inside is deleted after."""
        try:
            yield self.egraph
        finally:
            self.egraph.run_program(*self._run_clear)

    def load(self, imported: Imported) -> None:
        """Add the imported terms and facts (inside ``scope()``, after ``declare_for(imported)``)."""
        if imported is not self._ready:
            raise RuntimeError("declare_for(imported) first: rules it can fire may be undeclared")
        commands = []
        for relation, lines in rows(imported, self.constructors).items():
            commands.append(eb.Input(_SPAN, relation, self.files.write(relation, lines)))
        self.egraph.run_program(*commands, *self._run_load)
