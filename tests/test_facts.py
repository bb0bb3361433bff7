"""The facts encoding (``eqsat.core.facts``): a tensor's rank, last dim and contiguity are packed in one
``facts`` row; rules written with the fact forms render to read and state it."""

from __future__ import annotations

import pytest
from egglog import bindings as eb

from eqsat.core.facts import SCHEMA, encode_actions, encode_query, pack, unpack


@pytest.mark.parametrize("ndim, last, contiguous",
                         [(2, 2880, True), (0, -1, False), (64, 0, True), (3, 1 << 40, False)])
def test_pack_round_trips(ndim, last, contiguous):
    assert unpack(pack(ndim, last, contiguous)) == (ndim, last, contiguous)


@pytest.mark.parametrize("ndim, last", [(128, 4), (-1, 4), (2, -2)])
def test_pack_refuses_what_does_not_fit(ndim, last):
    with pytest.raises(ValueError):
        pack(ndim, last, False)


def test_each_read_tensor_gets_one_facts_atom_and_its_reads_become_expressions():
    query = ("(= __s (PadLast x p))", "(= (ndim x) 2)", '(dtype-ok "K" (dtype x))', "(= (dim x -1) __n)",
             "(contiguous w)", "(= __shape_s (shape w))")
    assert encode_query(query) == (
        "(= __s (PadLast x p))", "(= (% (/ __p_x 2) 128) 2)", '(dtype-ok "K" (dtype x))',
        "(= (- (/ __p_x 256) 1) __n)", "(= (% __p_w 2) 1)", "(= __shape_s (shape w))",
        "(= __p_x (facts x))", "(= __p_w (facts w))", "(>= (/ __p_x 256) 1)")


def test_a_query_without_packed_facts_is_unchanged():
    query = ("(= __lhs (Neg (Neg x)))", "(= (dtype x) (dtype y))")
    assert encode_query(query) == query


@pytest.mark.parametrize("atom", ["(= (ndim (Get x 0)) 2)", "(= (dim x 0) __n)", "(= __a (contiguous x))"])
def test_a_fact_form_on_anything_but_a_variable_or_last_dim_is_refused(atom):
    with pytest.raises(ValueError, match="does not apply to a variable"):
        encode_query((atom,))


def test_a_new_values_statements_become_one_row_where_the_first_was():
    actions = ("(let x (Reshape xg sq))", "(set (dtype x) dx)", "(set (shape x) sq)", "(set (ndim x) 2)",
               "(set (dim x -1) __n)", "(contiguous x)", "(union __lhs x)")
    assert encode_actions(actions) == ("(let x (Reshape xg sq))", "(set (dtype x) dx)", "(set (shape x) sq)",
                                       "(set (facts x) (+ (* (+ (* (+ __n 1) 128) 2) 2) 1))", "(union __lhs x)")
    assert encode_actions(("(set (ndim y) 1)",)) == ("(set (facts y) (+ (* (+ (* (+ -1 1) 128) 1) 2) 0))",)


@pytest.mark.parametrize("actions, match", [
    (("(set (dim y -1) 4)",), "lack"),
    (("(set (ndim y) 1)", "(set (ndim y) 2)"), "twice"),
    (("(set (dim y 0) n)",), "cannot render"),
])
def test_incomplete_or_odd_statements_are_refused(actions, match):
    with pytest.raises(ValueError, match=match):
        encode_actions(actions)


def test_the_rendered_forms_mean_what_the_fact_forms_meant():
    """In egglog: a symbolic last dim matches no ``(dim x -1)`` read; a class one of whose members is
    contiguous is contiguous; a stated value reads back as stated."""
    eg = eb.EGraph()
    program = ["(datatype T)", "(constructor L (i64) T)", SCHEMA, "(relation hit (String T))",
               f"(set (facts (L 1)) {pack(2, 64, True)})", f"(set (facts (L 2)) {pack(2, -1, True)})",
               f"(set (facts (L 3)) {pack(2, 64, False)})", f"(set (facts (L 4)) {pack(2, 64, True)})",
               "(union (L 3) (L 4))",
               "(rule (" + " ".join(encode_query(("(= x (L i))", "(= (dim x -1) __n)"))) + ') ((hit "dim" x)))',
               "(rule (" + " ".join(encode_query(("(= x (L i))", "(contiguous x)"))) + ') ((hit "contiguous" x)))',
               "(rule (" + " ".join(encode_query(("(= x (L 1))", "(= (ndim x) __r)", "(= (dim x -1) __n)"))) + ") (" +
               " ".join(encode_actions(("(let y (L 5))", "(set (ndim y) __r)", "(set (dim y -1) __n)")))
               + "))",
               "(run 1)"]
    for text in program:
        for command in eg.parse_program(text):
            eg.run_program(command)
    frozen = eg.freeze().functions
    classes = {eg.value_to_i64(r.inputs[0]): r.output for r in frozen["L"].rows}
    got = {(eg.value_to_string(r.inputs[0]), r.inputs[1]) for r in frozen["hit"].rows}
    assert got == {("dim", classes[1]), ("dim", classes[3]),
                   ("contiguous", classes[1]), ("contiguous", classes[2]), ("contiguous", classes[3])}
    stated = {r.inputs[0]: eg.value_to_i64(r.output) for r in frozen["facts"].rows}
    assert unpack(stated[classes[5]]) == (2, 64, False)
