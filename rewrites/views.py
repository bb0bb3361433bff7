"""View algebra, stated once. Every FX view op imports as ``Reshape(x, shape)`` (row-major), so
these equalities canonicalise any chain; fusion rules never mention views.

- a reshape of a reshape is one reshape to the final shape;
- a reshape to the shape ``x`` already has is ``x``;
- a 2-D reshape of a 2-D ``x`` with the same concrete last dim ``d > 0`` is ``x`` (a reshape keeps
  the number of elements, so the first dims agree too; with ``d = 0`` they need not). This catches
  one shape under two keys: the layout rules write a rows key such as ``"s77*8*128/128,128"`` that
  no imported value has, and a reshape of a value already in rows (e.g. the flat ``(T*H, D)`` core
  output viewed as ``(T, H, D)``) would otherwise stay a no-op reshape in the emitted graph.
- the first two pieces of a ``split`` into pieces of ``s`` over the last dim are the slices
  ``[0, s)`` and ``[s, 2s)`` along dim ``ndim - 1`` (how tracers write a slice of the last dim; a
  slice clamps its end to the dim, as the split's last piece is cut).
All are exact: a row-major reshape moves no value.
"""

from eqsat.core.rule import rewrite

_LAST_DIM = ("(= (ndim x) __r)", "(= __d (- __r 1))")

RULES = (
    rewrite("reshape-of-reshape", "(Reshape (Reshape x s1) s2)", "(Reshape x s2)", family="views"),
    rewrite("reshape-noop", "(Reshape x s)", "x", "(= (shape x) s)", family="views"),
    rewrite("reshape-noop-2d", "(Reshape x s)", "x", "(= (ndim __lhs) 2)", "(= (ndim x) 2)", "(= (dim __lhs -1) __d)",
            "(= (dim x -1) __d)", "(> __d 0)", family="views"),
    rewrite("split-first-piece", "(Get (SplitLast x s) 0)", "(Slice x __d 0 s)", *_LAST_DIM, family="views"),
    rewrite("split-second-piece", "(Get (SplitLast x s) 1)", "(Slice x __d s (* 2 s))", *_LAST_DIM,
            family="views"),
)
