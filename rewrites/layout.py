"""Layout rules: where values sit in memory is not what they are, so fusions see through reshapes.

All rules are exact (a row-major reshape moves no value), read every shape from facts and never name
a head count or size, so both gated-norm layouts ``(N * H, D)`` and ``(N, H, D)`` reach one kernel.
- ``quant-group-of-reshape``: ``QuantGroup(Reshape(y, s), G)`` is ``QuantGroup(y, G)`` reshaped when G
  divides both y's last dim and s's (groups are the same consecutive elements in either shape); the
  scale takes the shape its e-class already has, so only imported quants rewrite (no self-feeding).
- ``quant-token-of-reshape``: the same for the per-row quant of a reshape that keeps the last dim.
- ``rms-norm-gated-rows``: a gated norm of contiguous x (and z) of rank >= 3 is the reshape of the
  gated norm over rows ``(numel / D, D)``, keyed ``"<dims joined by *>/D,D"`` (unique per shape,
  emitted as ``reshape(x, [-1, D])``; keys with commas inside a dim are refused); it sets the facts of
  the terms it makes. ``reshape-noop-2d`` (``rewrites/views.py``) drops the reshape of values in rows.
- ``rms-norm-of-reshape`` / ``add-rms-norm-of-reshape``: a reshape keeping the last dim of a norm's
  output is the norm of the reshaped (contiguous) input, both outputs of the fused-add norm alike.
"""

from __future__ import annotations

from eqsat.core.rule import Rule, rule
from eqsat.core.spec import made


def _facts(t: str) -> tuple[str, ...]:
    return made(t, "dt", "__rows", 2, "D")


def _reshaped(t: str, dt: str) -> tuple[str, ...]:
    """The facts of ``t``, a contiguous view of dtype ``dt`` in shape ``s``, that keeps the last dim
    ``__d`` and has rank ``__k``."""
    return made(t, dt, "s", "__k", "__d")


_KEEPS_LAST = ("(= (ndim __lhs) __k)", "(= (dim __lhs -1) __d)", "(= (dim x -1) __d)", "(> __d 0)", "(contiguous x)",
               "(= __dx (dtype x))")

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
    rule("rms-norm-of-reshape", ("(= __lhs (Reshape (RmsNorm x w eps) s))", *_KEEPS_LAST),
         ("(let __x (Reshape x s))", *_reshaped("__x", "__dx"), "(union __lhs (RmsNorm __x w eps))"), family="layout"),
    rule("add-rms-norm-of-reshape",
         ("(= __a (AddRmsNorm x r w eps))", "(= __lhs (Reshape (Get __a 0) s))", *_KEEPS_LAST, "(contiguous r)",
          "(= S (shape x))", "(= (shape r) S)", "(= __dr (dtype r))"),
         ("(let __x (Reshape x s))", *_reshaped("__x", "__dx"), "(let __r (Reshape r s))", *_reshaped("__r", "__dr"),
          "(let __res (Reshape (Get __a 1) s))", *_reshaped("__res", "__dx"),
          "(let __b (AddRmsNorm __x __r w eps))", "(union __lhs (Get __b 0))", "(union __res (Get __b 1))",
          "(union (Get __a 1) (Reshape (Get __b 1) S))"),
         family="layout"),
    rule("quant-token-of-reshape",
         ("(= __r (Reshape y s))", "(= __q (QuantToken __r dt))", "(= __scale (Get __q 1))", "(= ss (shape __scale))",
          "(= (dim y -1) __d)", "(= (dim __r -1) __d)", "(> __d 0)"),
         ("(union (Get __q 0) (Reshape (Get (QuantToken y dt) 0) s))",
          "(union __scale (Reshape (Get (QuantToken y dt) 1) ss))"), family="layout"),
)
