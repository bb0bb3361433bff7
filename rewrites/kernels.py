"""Kernel rules, generated from the catalog: nothing here is written per kernel.

For a fused row ``K(params)`` with semantic outputs ``o_0 .. o_n`` two rules are made:
- ``fuse-K``: wherever the semantics occur and the row's side conditions hold, ``Get(K, i) = o_i``;
- ``unlift-K``: wherever ``K`` already occurs (a graph that is partly fused), the same equalities,
  so later fusions still see through it; a ``rounding`` kernel over fp16 is not unlifted (the fp16
  intermediate its semantics add loses precision below 6.1e-5: a choice of it could cost 16 fp8 steps).
The query of ``fuse-K`` is the outermost non-projection subterm of each output (deduplicated);
the equalities are the same in both directions, so which rule fires first never matters, and
``unlift-K`` adds nothing to a ``K`` that ``fuse-K`` made: it is its converse (``eqsat.engine.reach``).
"""

from __future__ import annotations

from eqsat.core.rule import Rule, rule
from eqsat.core.sexp import parse, show
from eqsat.core.spec import KernelSpec
from eqsat.kernels.catalog import Catalog


def strip_get(term: str) -> str:
    """``(Get X 0)`` -> ``X``; any other term is returned as is."""
    e = parse(term)
    return show(e[1]) if isinstance(e, list) and e[0] == "Get" else term


def _unions(spec: KernelSpec, k: str) -> tuple[str, ...]:
    outs = spec.outputs or ()
    if len(outs) == 1:
        return (f"(union {k} {outs[0]})",)
    return tuple(f"(union (Get {k} {i}) {o})" for i, o in enumerate(outs))


def kernel_rules(spec: KernelSpec) -> tuple[Rule, ...]:
    if spec.outputs is None:
        return ()
    call = f"({spec.name} {' '.join(spec.param_names)})"
    atoms = list(dict.fromkeys(strip_get(o) for o in spec.outputs))
    fuse_query = (*(f"(= __s{i} {a})" for i, a in enumerate(atoms)), *spec.constraints)
    fuse = rule(f"fuse-{spec.name}", fuse_query, (f"(let __k {call})", *_unions(spec, "__k")),
                spec.numerics, "kernels")
    if spec.expand is not None:  # a "leave it to Inductor" row never occurs in an input graph
        return (fuse,)
    # unfusing a rounding kernel adds the intermediate rounding it skips: in bf16 that moves q·s by
    # about one fp8 step (the rounding contract), in fp16 below 6.1e-5 by up to 16, so fp16 keeps it
    fp16 = (f'(!= (dtype {spec.tensor_params()[0]}) "float16")',) if spec.numerics == "rounding" else ()
    unlift = rule(f"unlift-{spec.name}", (f"(= __k {call})", *fp16), _unions(spec, "__k"), spec.numerics,
                  "unlift", converse=fuse.name)
    return (fuse, unlift)


def catalog_rules(catalog: Catalog) -> tuple[Rule, ...]:
    return tuple(r for spec in catalog.fused() for r in kernel_rules(spec))
