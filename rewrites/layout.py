"""Layout rules: where values sit in memory is not what they are, so fusions see through reshapes.

Both rules are exact (a row-major reshape moves no value) and read every shape from facts; no head
count or head size is ever named, so vLLM's two gated-norm layouts, ``(N * H, D)`` and
``(N, H, D)``, and any ``H``, ``D``, eps reach the same fused kernel (``eqsat.kernels.families.gated``).

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
- ``rms-norm-of-reshape`` / ``add-rms-norm-of-reshape``: a norm over the last dim is row-wise, so a
  reshape of its output that keeps the last dim is the norm of the reshaped input (both outputs of
  the fused-add norm: the residual reshaped alike, and the residual output the new one's reshaped back). This is what lets a norm over ``[T, 2, N]`` viewed
  as ``(-1, N)`` feed a 2-D fused kernel (DeepSeek-V3.2's indexer). The reshaped input must be
  contiguous (its reshape is then a view, contiguous too); the rules state the new terms' facts.
- ``quant-token-of-reshape``: the per-row quant of a reshape that keeps the last dim is that quant
  reshaped (q to the new shape, the ``[..., 1]`` scale to the shape its e-class has), as
  ``quant-group-of-reshape`` states it for groups.
"""

from __future__ import annotations

from eqsat.core.rule import Rule, rule


def _facts(t: str) -> tuple[str, ...]:
    return (f"(set (dtype {t}) dt)", f"(set (shape {t}) __rows)", f"(set (ndim {t}) 2)", f"(set (dim {t} -1) D)",
            f"(contiguous {t})")


def _reshaped(t: str, dt: str) -> tuple[str, ...]:
    """The facts of ``t``, a contiguous view of dtype ``dt`` in shape ``s``, that keeps the last dim
    ``__d`` and has rank ``__k``."""
    return (f"(set (dtype {t}) {dt})", f"(set (shape {t}) s)", f"(set (ndim {t}) __k)", f"(set (dim {t} -1) __d)",
            f"(contiguous {t})")


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
