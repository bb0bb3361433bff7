"""The engine (``eqsat.engine.engine``): declaring only the rules a graph can fire (``eqsat.engine.reach``) and
reusing one engine for many graphs change nothing but the time taken; the loader refuses rows
egglog would misread."""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from egglog import bindings as eb

import eqsat
from benchmarks.graphs import models
from eqsat import graphfile
from eqsat.core.egraph import EGraph
from eqsat.core.facts import FACTS, unpack
from eqsat.core.ir import LEAF
from eqsat.core.rule import Rule, rewrite, rule
from eqsat.core.spelling import VocabIndex
from eqsat.cost.roofline import RooflineCost, load_profile
from eqsat.engine import rows as load_rows
from eqsat.engine.engine import Engine, RowFiles
from eqsat.engine.plan import plan
from eqsat.engine.reach import Reach
from eqsat.engine.rows import _field
from eqsat.engine.saturate import egraph_size, saturate
from eqsat.engine.serialize import serialize
from eqsat.fx.capture import copy_graph
from eqsat.fx.importer import Arg, import_graph
from tests.conftest import rand, trace
from tests.test_corpus import CORPUS
from tests.test_lift import _every_rule_fires
from tests.test_order import GRAPHS

CONSTRUCTORS = {"A": (), "B": (), "C": (), "D": ()}


def test_a_rule_is_reached_through_what_other_rules_make():
    rules = [rewrite("a-b", "(A)", "(B)"), rewrite("b-c", "(B)", "(C)"), rewrite("d-a", "(D)", "(A)")]
    reach = Reach.of(rules, CONSTRUCTORS)
    assert [r.name for r in reach.closure({"A"})] == ["a-b", "b-c"]
    assert [r.name for r in reach.closure({"C"})] == []
    assert [r.name for r in reach.closure({"D"})] == ["a-b", "b-c", "d-a"]  # rule order, not discovery order


def test_a_rule_reading_a_literal_is_reached_only_where_a_row_holds_it_there():
    """A literal read in a slot (in an atom, or pinned by a side condition) must be in the graph's rows
    there or written there by a reached rule: as the graph holds it, as an action writes it, as a query
    variable carries it from one slot to another; an action writing a computed value opens the slot."""
    sorts = {"Q": ("T", "String", "f64"), "E": ("T",), "R": ("T", "String"), "D": ("T",)}
    rules = [rewrite("fn", '(Q x "fn" 448.0)', "(E x)"),
             rewrite("fnuz", "(Q x dt m)", "(E x)", '(= dt "fnuz")', "(= m 224.0)"),
             rule("relabel", ("(= t (R x s))",), ("(union t (Q x s 224.0))",)),
             rule("computed", ("(= t (D x))",), ('(union t (R x (+ "f" "nuz")))',))]
    reach = Reach.of(rules, sorts)

    def reached(present: set[str], *literals: tuple) -> list[str]:
        return [r.name for r in reach.closure(present, frozenset(literals))]

    fn, fnuz, m448, m224 = (("Q", 1), "fn"), (("Q", 1), "fnuz"), (("Q", 2), 448.0), (("Q", 2), 224.0)
    assert reached({"Q"}, fn, m448) == ["fn"]
    assert reached({"Q"}, fnuz, m224) == ["fnuz"]
    assert reached({"Q"}, fn, m224, fnuz, m448) == ["fn", "fnuz"]
    assert reached({"Q"}, fn, m224) == []  # neither form: each needs both its literals
    assert reached({"R"}, (("R", 1), "fnuz")) == ["fnuz", "relabel"]  # carried from R's slot, 224.0 written
    assert reached({"R"}, (("R", 1), "other")) == ["relabel"]
    assert reached({"R", "D"}, (("R", 1), "other")) == ["fnuz", "relabel", "computed"]  # a computed label
    assert [r.name for r in reach.closure({"Q"})] == ["fn", "fnuz"]  # literals not given: any
    assert reach.read_slots == {("Q", 1), ("Q", 2), ("R", 1)}  # R's label flows into Q's


def test_a_converse_rule_is_reached_only_when_its_converse_is_not_all_that_makes_its_terms():
    rules = [rewrite("a-k", "(A)", "(K)"), rule("k-a", ("(= __k (K))",), ("(union __k (A))",), converse="a-k"),
             rewrite("d-k", "(D)", "(K)")]
    reach = Reach.of(rules, {**CONSTRUCTORS, "K": ()})
    assert [r.name for r in reach.closure({"A"})] == ["a-k"]  # every K is a-k's: k-a would re-state it
    assert [r.name for r in reach.closure({"K"})] == ["a-k", "k-a"]  # a K of the graph's own
    assert [r.name for r in reach.closure({"A", "D"})] == ["a-k", "k-a", "d-k"]  # a K that d-k made


def test_given_the_rules_that_fired_only_their_actions_count():
    rules = [rewrite("a-b", "(A)", "(B)"), rewrite("b-c", "(B)", "(C)"), rule("c-fn", ("(= t (C))",), ('(union t (Q "fn"))',)),
             rewrite("fn", '(Q "fn")', "(D)")]
    reach = Reach.of(rules, {**CONSTRUCTORS, "Q": ("String",)})

    def next_(*fired: str) -> list[str]:
        return [r.name for r in reach.closure({"A"}, frozenset(), frozenset(fired))]

    assert [r.name for r in reach.closure({"A"}, frozenset())] == ["a-b", "b-c", "c-fn", "fn"]
    assert next_() == ["a-b"] and next_("a-b") == ["a-b", "b-c"] and next_("a-b", "b-c") == ["a-b", "b-c", "c-fn"]
    assert next_("a-b", "b-c", "c-fn") == ["a-b", "b-c", "c-fn", "fn"]  # c-fn wrote the literal fn reads


@pytest.mark.parametrize("numerics", ["exact", "rounding"])
def test_a_staged_rules_reach_read_off_the_rule_is_its_stages_read_one_by_one(numerics):
    options = eqsat.Options(numerics=numerics)
    known = plan(options.catalog, options.active_rules())
    assert any(len(s) == 2 for s in known.stages.values())  # some rule is staged
    alone = Reach.of(known.rules, known.constructors)
    assert (alone.rules, alone.needs, alone.makes, alone.converse, alone.literals) == \
        (known.reach.rules, known.reach.needs, known.reach.makes, known.reach.converse, known.reach.literals)


def _adding(fired: Counter[str], rules: Sequence[Rule]) -> Counter[str]:
    """``fired`` without the rules whose converse fired too: their matches re-state that rule's
    equalities on the terms it made, so a graph's e-graph is the same with or without them."""
    converse = {r.name: r.converse for r in rules}
    return Counter({k: v for k, v in fired.items() if converse.get(k) not in fired})


def _graphs() -> dict[str, object]:
    models.register_ops()
    every = lambda: trace(_every_rule_fires, rand(8, 512), rand(8, 512, seed=2), rand(512), rand(512, seed=3),  # noqa: E731
                          rand(8, 1024))
    corpus = {f"corpus {p.stem}": (lambda p=p: graphfile.load(p)) for p in sorted(CORPUS.glob("*.*.*.json"))}
    return {**GRAPHS, **models.GRAPHS, "every rule": every, **corpus}  # corpus: both fp8 forms, third-party code


@pytest.mark.parametrize("name", sorted(_graphs()))
def test_declaring_every_rule_fires_and_chooses_the_same(name):
    options = eqsat.Options(numerics="rounding", strict=True)
    rules = options.active_rules()
    graph = _graphs()[name]()
    lazy, eager = Engine(options.catalog, rules), Engine(options.catalog, rules)
    eager.declare(eager.rules)  # every rule as the engine runs it (staged where its query is cyclic)
    eager.run_every_declared = True  # and runs every one, reached or not
    a = eqsat.optimize(copy_graph(graph), options, engine=lazy)
    b = eqsat.optimize(copy_graph(graph), options, engine=eager)
    # the eager engine also runs unlift rules on the kernels fusions made, whose matches add nothing; a rule
    # declared as rules match runs from a later iteration, on classes already merged: its count may differ
    assert set(_adding(a.rules_fired, rules)) == set(_adding(b.rules_fired, rules))
    assert a.kernels_chosen == b.kernels_chosen
    assert a.predicted_after_us == b.predicted_after_us and a.egraph_nodes == b.egraph_nodes
    assert a.egraph_classes == b.egraph_classes and set(a.rules_fired) <= lazy.declared


def test_a_graph_of_vllm_ops_declares_no_lift_rule():
    """A graph in vLLM's ops can fire only the fusions of its ops: no rule that lifts a native chain."""
    from eqsat.fx.importer import import_graph
    from eqsat.kernels.vocabularies import default_index

    options = eqsat.Options(numerics="rounding")
    graph = models.GRAPHS["llama fp8 per-token"]()
    engine = Engine(options.catalog, options.active_rules())
    reachable = [r.name for r in engine.declare_for(import_graph(graph, options.catalog, default_index()), on_demand=True)]
    assert reachable and not [name for name in reachable if name.startswith("lift-")], reachable
    report = eqsat.optimize(graph, options)
    assert report.kernels_chosen and report.rules_reachable == len(reachable) < len(options.active_rules())


def test_one_engine_for_many_graphs_gives_what_a_fresh_engine_gives_each():
    options = eqsat.Options(numerics="rounding", strict=True)
    graphs = _graphs()
    shared = Engine(options.catalog, options.active_rules())
    for name in [*sorted(graphs), *sorted(graphs)]:  # twice: every graph after others
        ga, gb = graphs[name](), graphs[name]()
        a = eqsat.optimize(ga, options, engine=shared)
        b = eqsat.optimize(gb, options)
        # match counts depend on egglog's e-class numbering (which grows in a reused engine); the e-graph
        # and the graph written back do not
        # (the shared engine runs the unlift rules an earlier graph needed; here they add nothing)
        assert (set(_adding(a.rules_fired, shared.rules)), a.kernels_chosen, a.egraph_nodes, a.predicted_after_us,
                ga.code) == (set(_adding(b.rules_fired, shared.rules)), b.kernels_chosen, b.egraph_nodes,
                             b.predicted_after_us, gb.code), name
        sizes = shared.egraph.run_program(*shared.egraph.parse_program("(print-size)"))[0].sizes
        assert {t: n for t, n in sizes if n} == {"dtype-ok": sum(len(s.dtypes) for s in options.catalog)}


def test_a_graph_runs_only_the_declared_rules_it_can_fire():
    options = eqsat.Options(numerics="rounding", strict=True)
    engine = Engine(options.catalog, options.active_rules())
    first, second = models.GRAPHS["deepseek_v3 (1 layer)"](), models.GRAPHS["gpt-oss router + pad"]()
    eqsat.optimize(first, options, engine=engine)
    declared_for_first = {n for n in engine.declared if n in engine.running}
    report = eqsat.optimize(copy_graph(second), options, engine=engine)
    imported = import_graph(second, options.catalog, VocabIndex(options.vocabularies))
    can = {r.name for r in engine.reachable(frozenset(op for op, _ in imported.terms.values()))}
    assert engine.running and engine.running <= can  # any literal: a superset of the graph's closure
    assert declared_for_first - can  # the first graph's rules it cannot fire: declared, not run
    alone = eqsat.optimize(copy_graph(second), options)
    assert (report.kernels_chosen, report.egraph_nodes, set(report.rules_fired)) == \
        (alone.kernels_chosen, alone.egraph_nodes, set(alone.rules_fired))


def test_a_table_the_clear_ruleset_misses_fails_a_strict_pass():
    options = eqsat.Options(strict=True)
    engine = Engine(options.catalog, options.active_rules())
    engine.tables.add("Get")  # as if a delete rule covered it: none will be declared
    with pytest.raises(eqsat.EqSatInternalError, match="rows left"):
        eqsat.optimize(GRAPHS["layer"](), options, engine=engine)


@pytest.mark.parametrize(("value", "sort"), [("a\tb", "String"), (" padded", "String"), ("x\n", "String"),
                                             (True, "i64"), (1.5, "i64"), ("1", "f64"), (3, "T")])
def test_rows_egglog_would_misread_are_refused(value, sort):
    with pytest.raises(ValueError, match="cannot load|tensor argument"):
        _field(value, sort)


def test_fields_keep_their_values():
    assert [_field(v, s) for v, s in [(Arg(4), "T"), (-3, "i64"), (1e-6, "f64"), (2, "f64"), (float("inf"), "f64"),
                                      ("s77*8,128", "String"), ("", "String")]] == \
        ["4", "-3", "1e-06", "2.0", "inf", "s77*8,128", ""]


@pytest.mark.parametrize("name", sorted(_graphs()))
def test_the_size_bound_is_never_below_the_size(name):
    options = eqsat.Options(numerics="rounding")
    imported = import_graph(_graphs()[name](), options.catalog, VocabIndex(options.vocabularies))
    engine = Engine(options.catalog, options.active_rules())
    bound = engine.size_bound(imported)
    engine.declare_for(imported)
    with engine.scope() as egraph:
        engine.load(imported)
        assert egraph_size(egraph) <= bound.rows
        sat = saturate(egraph, eqsat.Budgets(), bound=bound, ruleset=engine.ruleset)
        assert sat.stop_reason == "saturated" and sat.nodes == 0  # never needed to ask egglog
        assert egraph_size(egraph) <= bound.rows + sum(n * bound.growth[k] for k, n in sat.matches.items())


def test_a_graph_is_loaded_only_after_declare_for_prepared_it():
    options = eqsat.Options()
    imported = import_graph(GRAPHS["layer"](), options.catalog, VocabIndex(options.vocabularies))
    engine = Engine(options.catalog, options.active_rules())
    with engine.scope(), pytest.raises(RuntimeError, match="declare_for"):
        engine.load(imported)


def test_the_engine_keeps_the_vocabulary_index_of_the_same_vocabularies():
    options = eqsat.Options()
    engine = Engine(options.catalog, options.active_rules())
    index = engine.vocab_index(options.vocabularies)
    assert engine.vocab_index(options.vocabularies) is index
    assert index.by_target == VocabIndex(options.vocabularies).by_target
    fewer = options.vocabularies[:1]
    assert engine.vocab_index(fewer).vocabularies is fewer


def test_loading_leaves_every_fact_and_no_input_row():
    """The loader and fact rules delete the rows they read; each rule still sees them (an iteration
    matches every rule before any acts), so no fact is lost."""
    options = eqsat.Options()
    imported = import_graph(models.deepseek_v3(1), options.catalog, VocabIndex(options.vocabularies))
    engine = Engine(options.catalog, options.active_rules())
    engine.declare_for(imported)
    with engine.scope() as egraph:
        engine.load(imported)
        sizes = dict(egraph.run_program(eb.PrintSize(eb.RustSpan("test", 0, 0), None))[0].sizes)
        frozen = egraph.freeze().functions
        tables = {name: {r.inputs[0]: r.output for r in frozen[name].rows} for name in ("dtype", "shape", FACTS)}
        loaded = sorted((egraph.value_to_string(tables["dtype"][c]), egraph.value_to_string(tables["shape"][c]),
                         *unpack(egraph.value_to_i64(p))) for c, p in tables[FACTS].items())
    wanted = sorted((f.dtype, ",".join(map(str, f.shape)), len(f.shape),
                     f.shape[-1] if f.shape and isinstance(f.shape[-1], int) else -1, f.contiguous)
                    for f in imported.facts.values())
    assert loaded == wanted  # three rows a value, holding each of its facts
    assert sizes["Fx"] == len(imported.terms)
    assert not {name: n for name, n in sizes.items() if n and (name.startswith("in-") or name == "tensor")}


@pytest.mark.parametrize("name", ["layer", "deepseek_v3 MoE (1 layer)", "qwen3_next gated norm", "every rule"])
def test_a_constructor_too_wide_for_the_shared_relation_loads_the_same(name, monkeypatch):
    """Every constructor forced into a relation of its own (as one with more arguments than the shared
    relation's slots is) gives the same e-graph and the same graph written back."""
    options = eqsat.Options(numerics="rounding", strict=True)
    ga, gb = _graphs()[name](), _graphs()[name]()
    a = eqsat.optimize(ga, options)
    monkeypatch.setattr(load_rows, "slots", lambda sorts: None)
    engine = Engine(options.catalog, options.active_rules())
    b = eqsat.optimize(gb, options, engine=engine)
    own = [n for n in engine.egraph.freeze().functions if n.startswith("in-") and n != load_rows.SHARED]
    assert len(own) == len({op for op, _ in import_graph(_graphs()[name](), options.catalog,
                                                         VocabIndex(options.vocabularies)).terms.values()} - {LEAF})
    assert (a.rules_fired, a.kernels_chosen, a.egraph_nodes, a.predicted_after_us, ga.code) == \
        (b.rules_fired, b.kernels_chosen, b.egraph_nodes, b.predicted_after_us, gb.code)


def test_an_engine_declares_only_the_constructors_its_graphs_and_rules_name():
    options = eqsat.Options()
    imported = import_graph(models.gpt_oss_router_pad(), options.catalog, VocabIndex(options.vocabularies))
    engine = Engine(options.catalog, options.active_rules())
    assert not engine.known
    rules = engine.declare_for(imported)
    named = ({op for op, _ in imported.terms.values()} - {LEAF}).union(*(engine.reach.needs[engine.rules.index(r)]
                                                             | engine.reach.makes[engine.rules.index(r)]
                                                             for r in rules))
    assert engine.known == named and len(named) < len(engine.constructors) / 2
    declared = set(engine.egraph.freeze().functions)
    assert named <= declared and not (set(engine.constructors) - named) & declared
    with pytest.raises(ValueError, match="not constructors"):
        engine.declare_constructors(["NoSuchOp"])


def test_row_files_hold_exactly_the_last_rows_and_go_with_their_owner():
    files = RowFiles()
    path = files.write("in-term", ["1\ta\tlonger row", "2\tb\tanother"])
    assert files.write("in-term", ["3\tc"]) == path  # overwritten in place: nothing of the longer rows is left
    assert Path(path).read_text() == "3\tc\n"
    other = files.write("tensor", ["4"])
    assert Path(other).read_text() == "4\n" and Path(path).read_text() == "3\tc\n"
    folder, fds = files.folder, [fd for fd, _ in files._open.values()]
    del files
    gc.collect()
    assert not folder.exists()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def _saturated(gm: object, options: eqsat.Options, engine: Engine) -> EGraph:
    imported = import_graph(gm, options.catalog, VocabIndex(options.vocabularies))
    engine.declare_for(imported)
    with engine.scope() as egraph:
        engine.load(imported)
        saturate(egraph, options.budgets, ruleset=engine.ruleset)
        return serialize(egraph, engine.extractable, imported.terms, imported.roots).egraph


def test_costs_kept_across_e_graphs_are_each_e_nodes_own_cost():
    options = eqsat.Options()
    profile = load_profile(options.profile)
    engine = Engine(options.catalog, options.active_rules())
    memo = engine.cost_memo(profile, options.sizes)
    for name in [*models.GRAPHS, *models.GRAPHS]:  # twice: the second time every cost is a kept one
        eg = _saturated(models.GRAPHS[name](), options, engine)
        kept = RooflineCost(eg, options.catalog, profile, options.sizes, engine.cost_memo(profile, options.sizes))
        fresh = RooflineCost(eg, options.catalog, profile, options.sizes)
        assert [kept(n) for n in eg.nodes] == [fresh(n) for n in eg.nodes], name
    assert engine.cost_memo(profile, options.sizes) is memo and memo.table
    assert engine.cost_memo(profile, 512) is not memo  # other sizes, other costs
