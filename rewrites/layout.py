"""Layout rules: where values sit in memory is not what they are, so fusions see through reshapes.

Both rules are exact (a row-major reshape moves no value) and read every shape from facts; no head
count or head size is ever named, so vLLM's two gated-norm layouts, ``(N * H, D)`` and
``(N, H, D)``, and any ``H``, ``D``, eps reach the same fused kernel (``eqsat.kernels.gated``).

- ``quant-group-of-reshape``: ``QuantGroup(Reshape(y, s), G)`` is ``QuantGroup(y, G)`` reshaped,
  when G divides both y's last dim and s's. Then every group is the same G consecutive elements
  in row-major memory in either shape, and groups come in the same order, so q reshapes to ``s``
  and the scale to the shape its e-class already has (a fact, set by the importer on every FX
  value; no shape arithmetic). Only quants whose scale has that fact rewrite, i.e. imported ones,
  which keeps the rule from feeding itself.
- ``rms-norm-gated-rows``: a gated norm of a contiguous x (and z) of rank >= 3 is the reshape of
  the gated norm over rows ``(numel / D, D)``: it is row-wise over the last dim D. The rows' shape
  key is written from facts as ``"<dims joined by *>/D,D"`` (``"s77*8*128/128,128"`` for
  ``"s77,8,128"``): it denotes the right shape for any symbolic dims, no two shapes share it, and
  the emitter spells it ``reshape(x, [-1, D])``. Keys with commas inside a dim are refused. The
  rule sets the facts of the three terms it makes (dtype, that key, rank 2, D, contiguous), which is
  what the fused kernel's constraints and the cost model read. No imported value has the key, so
  ``reshape-noop`` cannot see that a value already in rows needs no reshape; ``reshape-noop-2d``
  (``rewrites/views.py``) does, from rank and last dim.
"""

from __future__ import annotations

from rewrites.rule import Rule, rule


def _facts(t: str) -> tuple[str, ...]:
    return (f"(set (dtype {t}) dt)", f"(set (shape {t}) __rows)", f"(set (ndim {t}) 2)", f"(set (dim {t} -1) D)",
            f"(contiguous {t})")


_ROWS_KEY = '(+ (replace S "," "*") (+ "/" (+ (to-string D) (+ "," (to-string D)))))'

RULES: tuple[Rule, ...] = (
    rule("quant-group-of-reshape",
         ("(= __r (Reshape y s))", "(= __q (QuantGroup __r G dt))", "(= __scale (Get __q 1))",
          "(= ss (shape __scale))", "(= (dim y -1) __n)", "(= (dim __r -1) __m)", "(> G 0)", "(= 0 (% __n G))",
          "(= 0 (% __m G))"),
         ("(union (Get __q 0) (Reshape (Get (QuantGroup y G dt) 0) s))",
          "(union __scale (Reshape (Get (QuantGroup y G dt) 1) ss))"), family="layout"),
    rule("rms-norm-gated-rows",
         ("(= __g (RmsNormGated x z w eps))", "(= S (shape x))", "(= (shape z) S)", "(= (ndim x) __rank)",
          "(>= __rank 3)", "(= (count-matches S \",\") (- __rank 1))", "(= (dim x -1) D)", "(= dt (dtype x))",
          "(contiguous x)", "(contiguous z)"),
         (f"(let __rows {_ROWS_KEY})", "(let __x2 (Reshape x __rows))", "(let __z2 (Reshape z __rows))",
          "(let __g2 (RmsNormGated __x2 __z2 w eps))", "(union __g (Reshape __g2 S))",
          *_facts("__x2"), *_facts("__z2"), *_facts("__g2")), family="layout"),
)
