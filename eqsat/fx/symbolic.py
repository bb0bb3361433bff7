"""Questions about symbolic dims, answered through the graph's shape environment.

Rules and kernel contracts read a tensor's last dim; :class:`SymbolicDims` answers from what the
``ShapeEnv`` knows statically (replacements, ranges, ``torch._check`` divisibility). Where only the
hint can decide (``torch.compile(dynamic=True)`` makes every hidden size so), the policy decides:
- ``"guard"`` (default): ``specialize`` takes each symbol that is some loaded tensor's last dim and no
  tensor's first dim (never a token dim) at its hint, and ``commit`` guards ``symbol == hint`` for those
  a written rewrite reads, so another size recompiles, as Inductor does with sizes it specializes
  (vLLM marks only the token dim dynamic, so nothing is specialized there);
- ``"prove"``: only what the shape environment proves counts; a site needing more is not fused and
  ``explain`` names the constraint.
Dims are the expression strings the facts hold (``"s27"``, ``"8*s0"``).
"""

from __future__ import annotations

from typing import Literal

import sympy

from eqsat.fx.preconditions import substitute

SymbolicPolicy = Literal["guard", "prove"]


def hints(shape_env: object | None) -> dict:
    """A shape env's symbols and their hints (``backed_var_to_val`` from torch 2.13, where ``var_to_val``
    is deprecated; empty without an env)."""
    backed = getattr(shape_env, "backed_var_to_val", None)
    return backed if backed is not None else getattr(shape_env, "var_to_val", None) or {}


class SymbolicDims:
    """Answers ``multiple`` and ``at_most`` for dims of one graph (see the module docstring); the
    conditions decided on hints are kept by name in the answers, to ``commit`` those relied upon."""

    def __init__(self, shape_env: object | None, policy: SymbolicPolicy = "guard") -> None:
        if policy not in ("guard", "prove"):
            raise ValueError(f"symbolic policy must be 'guard' or 'prove', got {policy!r}")
        self.env, self.policy = shape_env, policy
        values = hints(shape_env)
        self.hints = dict(values)
        self.symbols = {str(s): s for s in values}
        self.committed: list[str] = []
        self.specialized: dict[str, int] = {}  # symbol name -> the hint the facts took it at

    def named_hints(self) -> dict[str, int]:
        """Each symbol's name and its hint, the size the graph was first run at (symbols with an int hint)."""
        return {n: int(v) for n, s in self.symbols.items() if isinstance(v := self.hints[s], (int, sympy.Integer))}

    def specialize(self, facts: dict[int, object]) -> None:
        """Under ``"guard"``: rewrite ``facts`` (FX node index -> facts) with each symbol that is a last
        dim and never a first dim at its hint (see the module docstring)."""
        if self.policy != "guard" or not self.hints:
            return
        last: set[str] = set()
        leading: set[str] = set()  # first dims, each read once (parsing an expression with sympy is dear)
        for f in facts.values():
            shape = getattr(f, "shape", ())
            if shape and isinstance(shape[-1], str) and shape[-1] in self.symbols:
                last.add(shape[-1])
            if len(shape) > 1 and isinstance(shape[0], str):
                leading.add(shape[0])
        if not last:
            return
        first = {str(s) for d in leading for s in sympy.sympify(d).free_symbols}
        chosen = {n: int(self.hints[self.symbols[n]]) for n in sorted(last - first)
                  if isinstance(self.hints.get(self.symbols[n]), (int, sympy.Integer))}
        if chosen:
            substitute(facts, chosen)  # type: ignore[arg-type]
            self.specialized.update(chosen)

    def guards_for(self, symbols: set[str]) -> set[str]:
        """The guards ``symbol == hint`` of those of ``symbols`` the facts specialized."""
        return {f"Eq({n}, {self.specialized[n]})" for n in symbols if n in self.specialized}

    def _expr(self, d: str) -> sympy.Expr | None:
        try:
            return sympy.sympify(d, locals=self.symbols)
        except (sympy.SympifyError, TypeError):
            return None

    def decide(self, cond: sympy.Basic) -> tuple[bool | None, str | None]:
        """(whether ``cond`` holds, the guard that answer needs: None when the shape environment knows)."""
        if self.env is not None:
            try:
                known = self.env._maybe_evaluate_static(cond)  # type: ignore[attr-defined]
            except Exception:
                known = None
            if known is not None and known in (sympy.true, sympy.false):
                return bool(known), None
        if self.policy != "guard" or not cond.free_symbols <= self.hints.keys():
            return None, None
        value = cond.xreplace(self.hints)
        if value not in (sympy.true, sympy.false):
            return None, None
        return bool(value), (str(cond) if value == sympy.true else None)

    def multiple(self, d: str, step: int) -> tuple[bool | None, str | None]:
        e = self._expr(d)
        return (None, None) if e is None or step <= 0 else self.decide(sympy.Eq(sympy.Mod(e, step), 0))

    def at_most(self, d: str, n: int) -> tuple[bool | None, str | None]:
        e = self._expr(d)
        return (None, None) if e is None else self.decide(sympy.Le(e, n))

    def commit(self, guards: set[str]) -> None:
        """Add each of ``guards`` (conditions an emitted rewrite relied upon) to the shape environment."""
        if self.env is None:
            return
        for g in sorted(guards):
            cond = sympy.sympify(g, locals=self.symbols)
            self.env.evaluate_expr(cond)  # type: ignore[attr-defined]
            self.committed.append(g)


def symbols_read(nodes: list[object]) -> set[str]:
    """The names of the symbols in the shapes of ``nodes``' values and of the values they read."""
    out: set[str] = set()

    def add(v: object) -> None:
        if isinstance(v, (tuple, list)):
            for x in v:
                add(x)
        elif hasattr(v, "shape"):
            for d in v.shape:  # type: ignore[attr-defined]
                if not isinstance(d, int):
                    out.update(str(s) for s in d.node.expr.free_symbols)

    for n in nodes:
        add(n.meta.get("val"))  # type: ignore[attr-defined]
        for a in n.all_input_nodes:  # type: ignore[attr-defined]
            add(a.meta.get("val"))
    return out
