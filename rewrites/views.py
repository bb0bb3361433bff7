"""View algebra, stated once. Every FX view op imports as ``Reshape(x, shape)`` (row-major), so
these two equalities canonicalise any chain; fusion rules never mention views.

- a reshape of a reshape is one reshape to the final shape;
- a reshape to the shape ``x`` already has is ``x``.
Both are exact: a row-major reshape moves no value.
"""

from rewrites.rule import rewrite

RULES = (
    rewrite("reshape-of-reshape", "(Reshape (Reshape x s1) s2)", "(Reshape x s2)", family="views"),
    rewrite("reshape-noop", "(Reshape x s)", "x", "(= (shape x) s)", family="views"),
)
