"""Random-graph fuzzer: random norm / quant / view graphs through ``eqsat.optimize``, every output checked.

    python -m benchmarks.fuzz --graphs N --seed S [--out benchmarks/results/fuzz.md] [--shrink K]
                              [--max-ops M] [--copy] [--show]

Graph ``i`` is generated from seed ``S + i`` (and ``--max-ops``) alone: ops, shapes, eps, profile,
numerics, tracing mode. ``--seed S+i --graphs 1 --show`` reproduces it and prints its program, both
graphs and the report. Each graph is a small Python function written as source (``Program.source``)
over a pool of values:

- inputs: 1-3 activations ``[tokens, N]`` (N mostly a multiple of 128, sometimes 320, 200 or 192; one
  in eight graphs has a ``[tokens, 2, N]`` activation; fp16 activations and fp32 or other-half-dtype
  weights now and then: look-alikes), weights ``[N]`` (a quarter shared by two norms), a ``(1, 1)``
  fp32 static scale, the 1-D weights of opaque GEMMs;
- 2 to ``--max-ops`` (default 8) ops drawn at random and chained (an op reads the newest value that
  fits half the time; quants prefer a norm's or silu_and_mul's output): ``vllm_ir.rms_norm`` /
  ``fused_add_rms_norm`` (both outputs used; a fresh or existing residual, now and then x itself),
  ``vllm.rocm_aiter_group_fp8_quant(y, 128)`` / ``rocm_aiter_per_token_quant`` (2-D only, as vLLM's
  AITER ops), vLLM's native ATen chains (``tests.test_lift``: ``rms_native``, ``add_rms_native``,
  ``quant_native`` with G = 64 or 128), the project's own ``eqsat::`` ops (norms, group quant with
  G = 32 / 64 / 128 and either fp8 dtype, per-token and static quants, ``silu_and_mul``), native
  silu-and-mul, the fused ops themselves (vLLM's AITER norm + group / per-token / static quants, with
  add, act_mul + quant; eqsat's fused group quants), per-head reshapes and back (``reshape`` /
  ``view``), a norm of a 3-D value then its rows (``reshape(-1, N)``), one-level column splits,
  elementwise ops (times a constant, add, abs), the opaque GEMMs ``eqsat_fuzz::gemm`` (bf16 in, bf16
  out) and ``eqsat_fuzz::fp8_gemm`` (reads a (q, scale) pair; ``exact`` graphs only, where fp8 values
  must be bit-exact); fan-out arises from operand choice and from outputs taken off the middle of a
  chain; eps from {1e-6, 1e-5, 3e-4, 1e-2}. Nested splits (MLA's latents) are not generated: the MLA
  dual norm rounds its bf16 outputs once, which the bit-exact bf16 check below does not allow.

Only graphs the stand-ins accept are built (vLLM's AITER quants on 2-D values, G = 128 dividing N);
a graph that still fails to trace, or whose original fails to run, counts as "not generated".

Per graph: trace it (``tests.conftest.trace``: symbolic tokens; one in five with static shapes
through ``make_fx(tracing_mode="fake")``) and trace it again for the copy to optimize (``--copy``:
``eqsat.fx.capture.copy_graph`` of the first, a third faster); ``eqsat.optimize(copy, profile=P,
sizes=256, strict=True, numerics=...)`` (half the symbolic graphs at sizes ``RANGE`` instead: ``Program.sizes``)
with P ``mi300x`` or ``h200`` by the seed's parity and
numerics ``rounding`` (one in five ``exact``); an exception is an internal error, and so is a graph
``Graph.lint`` rejects (the pass is then run again without ``strict`` and that result checked as well:
``Report.dropped`` counts the sites it dropped). Both graphs run on fresh inputs with 5 and 13 tokens
(static graphs: the traced 8) at magnitudes 1 and 1e-3 (activations scaled, weights at 1) and every
output is compared with ``tests.test_rules.compare_outputs`` (``rounding``: bf16 bit-exact, fp8
q·scale within ``NATIVE_QUANT_TOL_STEPS`` (23/17) fp8 steps, the lifted native quant's tolerance; ``exact``: bit-exact); a rounding
graph's fp8 output beyond that passes only if, measured from exact arithmetic, it is within that tolerance
of where the original's is (``closer_to_exact``: an fp16 intermediate that underflows puts the
original, not the fused kernel, off). A wrong result is any other mismatch or an optimized graph that
fails to run. Failures are grouped by kind
(``failure_kind``: the message with numbers and shapes blanked); ``--shrink K`` reduces the first
failure of each of the first K kinds to a smaller program that fails the same way (outputs dropped,
values bypassed by an earlier value of their type, dead code removed). Exit status 1 if any graph
is wrong or errored.
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from eqsat.rewrites.lift import NATIVE_QUANT_TOL_STEPS
from torch.fx.experimental.proxy_tensor import make_fx

import eqsat
from eqsat.decision import RANGE_FOUND
from eqsat.fx.capture import copy_graph
from eqsat.kernels.torch_ops import register_vllm_standins
from eqsat.library.define import define_op
from eqsat.library.reference import fp8_step_error
from tests.conftest import trace
from tests.test_lift import add_rms_native, quant_native, rms_native
from tests.test_rules import compare_outputs

ROUNDING_TOL = NATIVE_QUANT_TOL_STEPS  # fp8 steps: lift-quant-group's stated tolerance
EPS = (1e-6, 1e-5, 3e-4, 1e-2)
PROFILES = ("mi300x", "h200")
RANGE = (1, 8, 64, 256, 1024, 4096, 8192)  # e2e.py's M: a compile range as vLLM's passes see one
TRACE_TOKENS = 8
RUN_TOKENS = (5, 13)
MAGNITUDES = (1.0, 1e-3)
MAX_OPS = 8
DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                                  "fnuz": torch.float8_e4m3fnuz, "fn": torch.float8_e4m3fn}
_SRC = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32", "fnuz": "FNUZ", "fn": "FN"}
_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})


# -- the opaque GEMMs: a private namespace, so no rule knows them ------------------------------------

def _gemm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    k = x.shape[-1]
    return (x.float() @ w.float().view(-1, k).t() * k ** -0.5).to(x.dtype)


def _gemm_fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty([*x.shape[:-1], w.shape[0] // x.shape[-1]])


def _fp8_gemm(q: torch.Tensor, s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    k = q.shape[-1]
    x = (q.float().unflatten(-1, (s.shape[-1], -1)) * s.unsqueeze(-1)).flatten(-2)
    return (x @ w.float().view(-1, k).t() * k ** -0.5).to(torch.bfloat16)


def _fp8_gemm_fake(q: torch.Tensor, s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return q.new_empty([*q.shape[:-1], w.shape[0] // q.shape[-1]], dtype=torch.bfloat16)


def register_ops() -> None:
    """``eqsat_fuzz::gemm(x, w)`` (``w`` 1-D, ``M * K`` long: bf16 out) and ``fp8_gemm(q, scale, w)``."""
    define_op(_LIBS, "eqsat_fuzz", "gemm(Tensor x, Tensor w) -> Tensor", _gemm, _gemm_fake)
    define_op(_LIBS, "eqsat_fuzz", "fp8_gemm(Tensor q, Tensor s, Tensor w) -> Tensor", _fp8_gemm, _fp8_gemm_fake)


# -- programs -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Val:
    """A value of the program: ``[rows * tokens, *tail]`` of ``dtype``; ``role`` act, q (with ``scale``),
    s (a scale), sq (a static quant's q, no scale)."""

    name: str
    tail: tuple[int, ...]
    dtype: str
    rows: int = 1
    role: str = "act"
    contiguous: bool = True
    split_child: bool = False
    scale: str | None = None
    normed: bool = False  # a norm's or silu_and_mul's output, or a view of one: what quants prefer to read

    def sig(self) -> tuple[object, ...]:
        return (self.tail, self.dtype, self.rows, self.role)


@dataclass(frozen=True)
class Input:
    name: str
    kind: str  # act, weight, scale, gemm_w
    shape: tuple[int, ...]  # act: the dims after tokens
    dtype: str


@dataclass(frozen=True)
class Stmt:
    outs: tuple[str, ...]
    expr: str
    uses: tuple[str, ...]
    op: str


@dataclass(frozen=True)
class Program:
    seed: int
    numerics: str
    profile: str
    static: bool
    inputs: tuple[Input, ...]
    stmts: tuple[Stmt, ...]
    outputs: tuple[str, ...]
    vals: dict[str, Val]
    max_ops: int = MAX_OPS

    @property
    def sizes(self) -> int | tuple[int, ...]:
        """Where the pass costs the graph: 256, or for every other symbolic graph (by ``seed // 2``'s
        parity, drawing nothing) vLLM-like range ``RANGE``, whose search past a size it loses at
        (``eqsat.decision.no_slower``) is then exercised."""
        return RANGE if not self.static and self.seed // 2 % 2 else 256

    def reproduce(self) -> str:
        """The command line that regenerates and shows this graph."""
        ops = f" --max-ops {self.max_ops}" if self.max_ops != MAX_OPS else ""
        return f"python -m benchmarks.fuzz --seed {self.seed} --graphs 1{ops} --show"

    def source(self) -> str:
        lines = [f"def f({', '.join(i.name for i in self.inputs)}):"]
        lines += [f"    {', '.join(s.outs)} = {s.expr}" for s in self.stmts]
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines)

    def describe(self) -> str:
        shapes = ", ".join(f"{i.name}: {_shape_text(i)}" for i in self.inputs)
        return (f"seed {self.seed}: numerics={self.numerics}, profile={self.profile}, "
                f"{'static' if self.static else 'symbolic tokens'}, sizes {self.sizes}; inputs {shapes}")

    def function(self) -> Callable[..., Any]:
        namespace: dict[str, Any] = dict(_NAMESPACE)
        exec(compile(self.source(), f"<fuzz seed {self.seed}>", "exec"), namespace)
        return namespace["f"]

    def restricted(self, outputs: Sequence[str]) -> Program:
        """The program computing only ``outputs`` (dead statements and unused inputs dropped)."""
        need = set(outputs)
        kept: list[Stmt] = []
        for s in reversed(self.stmts):
            if need & set(s.outs):
                kept.append(s)
                need |= set(s.uses)
        return replace(self, stmts=tuple(reversed(kept)), outputs=tuple(outputs),
                       inputs=tuple(i for i in self.inputs if i.name in need))


def _shape_text(i: Input) -> str:
    dims = ("T", *map(str, i.shape)) if i.kind == "act" else tuple(map(str, i.shape))
    return f"{i.dtype}[{', '.join(dims)}]"


_NAMESPACE: dict[str, Any] = {
    "torch": torch, "F": F, "FNUZ": torch.float8_e4m3fnuz, "FN": torch.float8_e4m3fn,
    "rms_native": rms_native, "add_rms_native": add_rms_native, "quant_native": quant_native,
}


def _bind_namespace() -> None:
    register_vllm_standins()
    register_ops()
    _NAMESPACE.update(vllm=torch.ops.vllm, vir=torch.ops.vllm_ir, own=torch.ops.eqsat, fz=torch.ops.eqsat_fuzz)


# -- the generator --------------------------------------------------------------------------------

WIDTHS = (256, 512, 768, 1024, 384)
ODD_WIDTHS = (320, 200, 192)
GEMM_WIDTHS = (256, 512, 768, 320)


class _Gen:
    def __init__(self, seed: int, max_ops: int) -> None:
        self.rng = random.Random(seed)
        self.seed, self.max_ops = seed, max_ops
        self.inputs: list[Input] = []
        self.stmts: list[Stmt] = []
        self.vals: dict[str, Val] = {}
        self.order: list[str] = []  # values in creation order
        self.counter = 0
        self.scale: str | None = None

    # naming and inputs
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def add_val(self, v: Val) -> Val:
        self.vals[v.name] = v
        self.order.append(v.name)
        return v

    def new_act(self, tail: tuple[int, ...], dtype: str) -> Val:
        name = f"x{sum(i.kind == 'act' for i in self.inputs)}"
        self.inputs.append(Input(name, "act", tail, dtype))
        return self.add_val(Val(name, tail, dtype))

    def weight(self, n: int, dtype: str, *, look_alikes: bool = True) -> tuple[str, str]:
        """A weight ``[n]`` (name, dtype): mostly ``dtype``; with ``look_alikes`` now and then fp32 or the
        other half dtype; a quarter of the time an existing one (two norms share it)."""
        rng = self.rng
        r = rng.random()
        wdt = dtype if not look_alikes or r >= 0.12 else "fp32" if r < 0.08 else {"bf16": "fp16"}.get(dtype, "bf16")
        same = [i.name for i in self.inputs if i.kind == "weight" and i.shape == (n,) and i.dtype == wdt]
        if same and rng.random() < 0.25:
            return rng.choice(same), wdt
        name = f"w{sum(i.kind == 'weight' for i in self.inputs)}"
        self.inputs.append(Input(name, "weight", (n,), wdt))
        return name, wdt

    def static_scale(self) -> str:
        if self.scale is None:
            self.scale = "s_static"
            self.inputs.append(Input(self.scale, "scale", (1, 1), "fp32"))
        return self.scale

    def emit(self, outs: Sequence[Val], expr: str, uses: Sequence[str], op: str) -> None:
        for v in outs:
            self.add_val(v)
        self.stmts.append(Stmt(tuple(v.name for v in outs), expr, tuple(uses), op))

    # operands
    def acts(self, pred: Callable[[Val], bool]) -> list[Val]:
        return [self.vals[n] for n in self.order if self.vals[n].role == "act" and pred(self.vals[n])]

    def pick(self, pred: Callable[[Val], bool] = lambda v: True, prefer_normed: bool = False) -> Val | None:
        """An operand: most often the newest that fits (chains), else a recent one, else any (fan-out)."""
        rng = self.rng
        got = self.acts(pred)
        if prefer_normed and rng.random() < 0.8:
            got = [v for v in got if v.normed] or got
        if not got:
            return None
        r = rng.random()
        return got[-1] if r < 0.5 else rng.choice(got[-3:]) if r < 0.8 else rng.choice(got)

    def eps(self) -> str:
        return repr(self.rng.choice(EPS))

    def fp8(self, fn_share: float = 0.15) -> str:
        return "fn" if self.rng.random() < fn_share else "fnuz"

    # ops: each returns False when it does not apply to the pool
    def op_rms(self, spelling: str) -> bool:
        half = spelling == "native"
        x = self.pick(lambda v: not half or v.dtype in ("bf16", "fp16"))
        if x is None:
            return False
        w, wdt = self.weight(x.tail[-1], x.dtype)
        if half and wdt == "fp32":
            w, wdt = self.weight(x.tail[-1], x.dtype, look_alikes=False)
        out_dt = wdt if half else x.dtype
        y = Val(self.fresh(), x.tail, out_dt, x.rows, normed=True)
        call = {"vir": f"vir.rms_norm({x.name}, {w}, {self.eps()})",
                "own": f"own.rms_norm({x.name}, {w}, {self.eps()})",
                "native": f"rms_native({x.name}.float(), {w}, {self.eps()})"}[spelling]
        self.emit([y], call, [x.name, w], f"rms_norm[{spelling}]")
        return True

    def residual(self, x: Val) -> Val | None:
        """A residual for ``x``: another value of its shape and dtype, now and then ``x`` itself, else a
        new activation input (when ``x`` has one row per token)."""
        same = [r for r in self.acts(lambda v: v.sig() == x.sig()) if r.name != x.name]
        if same and self.rng.random() < 0.85:
            return self.rng.choice(same)
        if self.rng.random() < 0.05:
            return x
        if x.rows == 1 and sum(i.kind == "act" for i in self.inputs) < 4:
            return self.new_act(x.tail, x.dtype)
        return None

    def op_add_rms(self, spelling: str) -> bool:
        half = spelling == "native"
        x = self.pick(lambda v: not half or v.dtype in ("bf16", "fp16"))
        r = None if x is None else self.residual(x)
        if x is None or r is None:
            return False
        w, _ = self.weight(x.tail[-1], x.dtype, look_alikes=not half)
        n, res = Val(self.fresh(), x.tail, x.dtype, x.rows, normed=True), Val(self.fresh(), x.tail, x.dtype, x.rows)
        fn = {"vir": "vir.fused_add_rms_norm", "own": "own.fused_add_rms_norm", "native": "add_rms_native"}[spelling]
        self.emit([n, res], f"{fn}({x.name}, {r.name}, {w}, {self.eps()})", [x.name, r.name, w],
                  f"fused_add_rms_norm[{spelling}]")
        return True

    def op_norm3d(self) -> bool:
        """A norm over the last dim of a ``[T, k, N]`` value, then its rows: ``reshape(-1, N)``."""
        x = self.pick(lambda v: len(v.tail) == 2)
        if x is None:
            return False
        w, _ = self.weight(x.tail[-1], x.dtype)
        y = Val(self.fresh(), x.tail, x.dtype, x.rows, normed=True)
        self.emit([y], f"vir.rms_norm({x.name}, {w}, {self.eps()})", [x.name, w], "rms_norm[vir, 3-D]")
        z = Val(self.fresh(), x.tail[-1:], x.dtype, x.rows * x.tail[0], normed=True)
        self.emit([z], f"{y.name}.reshape(-1, {x.tail[-1]})", [y.name], "reshape(rows)")
        return True

    def op_fused(self) -> bool:
        """One of the fused ops itself, as a graph vLLM already fused (or eqsat's own spelling of it)."""
        rng = self.rng
        kind = rng.choice(("rms_group", "add_group", "act_group", "rms_token", "add_token", "rms_static",
                           "add_static", "own_rms_group", "own_add_group", "own_act_group"))
        g = rng.choice((128, 128, 64))
        two_d = not kind.startswith("own_")
        act = kind.endswith("act_group")

        def fits(v: Val) -> bool:
            n = v.tail[-1] // 2 if act else v.tail[-1]
            return (len(v.tail) == 1 or not two_d) and (not kind.endswith("group") or n % g == 0) and n > 0
        x = self.pick(fits)
        if x is None:
            return False
        add = "add" in kind
        r = self.residual(x) if add else None
        if add and r is None:
            return False
        eps, dt = self.eps(), self.fp8(0.0 if two_d and kind.endswith("group") else 0.3)
        uses = [x.name] + ([r.name] if r is not None else [])
        if not act:
            w, _ = self.weight(x.tail[-1], x.dtype)
            uses.append(w)
        tail = (*x.tail[:-1], x.tail[-1] // 2) if act else x.tail
        groups = tail[-1] // g if kind.endswith("group") else 1
        s = Val(self.fresh("s"), (*tail[:-1], groups), "fp32", x.rows, role="s")
        static = kind.endswith("static")
        q = Val(self.fresh("q"), tail, dt, x.rows, role="sq" if static else "q", scale=None if static else s.name)
        res = Val(self.fresh(), x.tail, x.dtype, x.rows)
        xr = f"{x.name}, {r.name}" if r is not None else x.name
        d = _SRC[dt]
        if kind == "rms_group":
            outs, expr = [q, s], f"vllm.rocm_aiter_rmsnorm_fp8_group_quant({x.name}, {w}, {eps}, {g})"
        elif kind == "add_group":
            outs, expr = [q, res, s], f"vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant({xr}, {w}, {eps}, {g})"
        elif kind == "act_group":
            outs, expr = [q, s], f"vllm.rocm_aiter_act_mul_and_fp8_group_quant({x.name}, {g})"
        elif kind == "rms_token":
            outs, expr = [q, s], f"vllm.rocm_aiter_rmsnorm_fused_dynamic_quant({x.name}, {w}, {eps}, {d})"
        elif kind == "add_token":
            outs, expr = [q, res, s], f"vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant({xr}, {w}, {eps}, {d})"
        elif kind in ("rms_static", "add_static"):
            scale = self.static_scale()
            uses.append(scale)
            fn = "fused_rms" if kind == "rms_static" else "fused_add_rms"
            outs = [q] if kind == "rms_static" else [q, res]
            expr = f"vllm.rocm_aiter_{fn}_fp8_per_tensor_static_quant({xr}, {w}, {eps}, {scale}, {d})"
        elif kind == "own_rms_group":
            outs, expr = [q, s], f"own.rmsnorm_fp8_group_quant({x.name}, {w}, {eps}, {g}, {d})"
        elif kind == "own_add_group":
            outs, expr = [q, res, s], f"own.rmsnorm_add_fp8_group_quant({xr}, {w}, {eps}, {g}, {d})"
        else:
            outs, expr = [q, s], f"own.silu_mul_fp8_group_quant({x.name}, {g}, {d})"
        self.emit(outs, expr, uses, f"fused[{kind}]")
        return True

    def _pair(self, x: Val, qdt: str, groups: int, expr: str, op: str) -> None:
        s = Val(self.fresh("s"), (*x.tail[:-1], groups), "fp32", x.rows, role="s")
        q = Val(self.fresh("q"), x.tail, qdt, x.rows, role="q", scale=s.name)
        self.emit([q, s], expr, [x.name], op)

    def op_vllm_group(self) -> bool:
        x = self.pick(lambda v: len(v.tail) == 1 and v.tail[0] % 128 == 0, True)
        if x is None:
            return False
        self._pair(x, "fnuz", x.tail[0] // 128, f"vllm.rocm_aiter_group_fp8_quant({x.name}, 128)",
                   "group_quant[vllm]")
        return True

    def op_vllm_token(self) -> bool:
        x = self.pick(lambda v: len(v.tail) == 1, True)
        if x is None:
            return False
        dt = self.fp8()
        self._pair(x, dt, 1, f"vllm.rocm_aiter_per_token_quant({x.name}, {_SRC[dt]})", "token_quant[vllm]")
        return True

    def op_own_group(self) -> bool:
        g = self.rng.choice((64, 128, 128, 32))
        x = self.pick(lambda v: v.tail[-1] % g == 0, True)
        if x is None:
            return False
        dt = self.fp8(0.3)
        self._pair(x, dt, x.tail[-1] // g, f"own.group_fp8_quant({x.name}, {g}, {_SRC[dt]})", "group_quant[own]")
        return True

    def op_native_group(self) -> bool:
        g = self.rng.choice((64, 128))
        x = self.pick(lambda v: len(v.tail) == 1 and v.tail[0] % g == 0 and v.dtype in ("bf16", "fp16"), True)
        if x is None:
            return False
        self._pair(x, "fnuz", x.tail[0] // g, f"quant_native({x.name}, {g})", "group_quant[native]")
        return True

    def op_own_token(self) -> bool:
        x = self.pick(prefer_normed=True)
        if x is None:
            return False
        dt, fn = self.fp8(0.3), self.rng.choice(("token_fp8_quant", "vllm_token_fp8_quant"))
        self._pair(x, dt, 1, f"own.{fn}({x.name}, {_SRC[dt]})", f"token_quant[own.{fn}]")
        return True

    def op_static(self) -> bool:
        x = self.pick(prefer_normed=True)
        if x is None:
            return False
        dt, fn = self.fp8(0.3), self.rng.choice(("static_fp8_quant", "vllm_static_fp8_quant"))
        s = self.static_scale()
        q = Val(self.fresh("q"), x.tail, dt, x.rows, role="sq")
        self.emit([q], f"own.{fn}({x.name}, {s}, {_SRC[dt]})", [x.name, s], f"static_quant[own.{fn}]")
        return True

    def op_silu(self, spelling: str) -> bool:
        x = self.pick(lambda v: v.tail[-1] % 2 == 0 and v.tail[-1] >= 128)
        if x is None:
            return False
        d = x.tail[-1] // 2
        y = Val(self.fresh(), (*x.tail[:-1], d), x.dtype, x.rows, normed=True)
        expr = (f"own.silu_and_mul({x.name})" if spelling == "own"
                else f"F.silu({x.name}[..., :{d}]) * {x.name}[..., {d}:]")
        self.emit([y], expr, [x.name], f"silu_and_mul[{spelling}]")
        return True

    def op_heads(self) -> bool:
        x = self.pick(lambda v: len(v.tail) == 1 and any(v.tail[0] % d == 0 and d < v.tail[0] for d in (32, 64, 128)))
        if x is None:
            return False
        n = x.tail[0]
        d = self.rng.choice([d for d in (32, 64, 128, 128) if n % d == 0 and d < n])
        how = "view" if x.contiguous and self.rng.random() < 0.5 else "reshape"
        y = Val(self.fresh(), (n // d, d), x.dtype, x.rows, contiguous=x.contiguous, normed=x.normed)
        self.emit([y], f"{x.name}.{how}(-1, {n // d}, {d})", [x.name], f"{how}(heads)")
        return True

    def op_flat(self) -> bool:
        x = self.pick(lambda v: len(v.tail) >= 2)
        if x is None:
            return False
        how = "view" if x.contiguous and self.rng.random() < 0.5 else "reshape"
        if self.rng.random() < 0.5:  # back to one row per token
            y = Val(self.fresh(), (x.tail[0] * x.tail[1],), x.dtype, x.rows, contiguous=x.contiguous,
                    normed=x.normed)
            self.emit([y], f"{x.name}.{how}(-1, {y.tail[0]})", [x.name], f"{how}(merge heads)")
        else:  # rows of the last dim
            y = Val(self.fresh(), (x.tail[-1],), x.dtype, x.rows * x.tail[0], contiguous=x.contiguous,
                    normed=x.normed)
            self.emit([y], f"{x.name}.{how}(-1, {y.tail[0]})", [x.name], f"{how}(rows)")
        return True

    def op_split(self) -> bool:
        x = self.pick(lambda v: len(v.tail) == 1 and not v.split_child and v.tail[0] >= 128)
        if x is None:
            return False
        n = x.tail[0]
        a = self.rng.choice([c for c in (n // 2, 128, n - 128, 64, n // 4) if 0 < c < n])
        outs = [Val(self.fresh(), (c,), x.dtype, x.rows, contiguous=False, split_child=True, normed=x.normed)
                for c in (a, n - a)]
        self.emit(outs, f"{x.name}.split([{a}, {n - a}], -1)", [x.name], "split")
        return True

    def op_elementwise(self) -> bool:
        x = self.pick()
        if x is None:
            return False
        kind = self.rng.choice(("mul", "mul", "add", "abs"))
        if kind == "add":
            others = [o for o in self.acts(lambda v: v.sig() == x.sig()) if o.name != x.name]
            if not others:
                return False
            o = self.rng.choice(others)
            y = Val(self.fresh(), x.tail, x.dtype, x.rows)
            self.emit([y], f"{x.name} + {o.name}", [x.name, o.name], "add")
            return True
        y = Val(self.fresh(), x.tail, x.dtype, x.rows)
        expr = f"{x.name} * {self.rng.choice((0.5, 2.0, 3.0, -1.0, 0.125))}" if kind == "mul" else f"torch.abs({x.name})"
        self.emit([y], expr, [x.name], kind)
        return True

    def op_gemm(self) -> bool:
        x = self.pick(lambda v: len(v.tail) == 1 and v.dtype in ("bf16", "fp16"))
        if x is None:
            return False
        m = self.rng.choice(GEMM_WIDTHS)
        w = f"g{sum(i.kind == 'gemm_w' for i in self.inputs)}"
        self.inputs.append(Input(w, "gemm_w", (m * x.tail[0],), x.dtype))
        y = Val(self.fresh(), (m,), x.dtype, x.rows)
        self.emit([y], f"fz.gemm({x.name}, {w})", [x.name, w], "gemm")
        return True

    def op_fp8_gemm(self) -> bool:
        qs = [self.vals[n] for n in self.order if self.vals[n].role == "q" and len(self.vals[n].tail) == 1]
        if not qs:
            return False
        q = self.rng.choice(qs)
        assert q.scale is not None
        m = self.rng.choice(GEMM_WIDTHS)
        w = f"g{sum(i.kind == 'gemm_w' for i in self.inputs)}"
        self.inputs.append(Input(w, "gemm_w", (m * q.tail[0],), "bf16"))
        y = Val(self.fresh(), (m,), "bf16", q.rows)
        self.emit([y], f"fz.fp8_gemm({q.name}, {q.scale}, {w})", [q.name, q.scale, w], "fp8_gemm")
        return True

    def generate(self) -> Program:
        rng = self.rng
        numerics = "exact" if rng.random() < 0.2 else "rounding"
        profile = PROFILES[self.seed % 2]
        static = rng.random() < 0.2
        dtype = "fp16" if rng.random() < 0.1 else "bf16"
        n0 = rng.choice(ODD_WIDTHS) if rng.random() < 0.12 else rng.choice(WIDTHS)
        for k in range(rng.choice((1, 1, 2, 2, 3))):
            n = n0 if k == 0 or rng.random() < 0.75 else rng.choice(WIDTHS)
            dt = dtype if rng.random() > 0.05 else {"bf16": "fp16", "fp16": "bf16"}[dtype]
            self.new_act((2, n) if k == 0 and rng.random() < 0.12 else (n,), dt)
        ops: list[tuple[float, Callable[[], bool]]] = [
            (4.0, lambda: self.op_rms("vir")), (1.5, lambda: self.op_rms("own")), (1.5, lambda: self.op_rms("native")),
            (3.0, lambda: self.op_add_rms("vir")), (1.0, lambda: self.op_add_rms("own")),
            (1.0, lambda: self.op_add_rms("native")),
            (3.5, self.op_vllm_group), (2.0, self.op_vllm_token), (2.0, self.op_own_group),
            (1.5, self.op_native_group), (1.0, self.op_own_token), (1.0, self.op_static),
            (1.5, lambda: self.op_silu("own")), (0.5, lambda: self.op_silu("native")),
            (1.5, self.op_heads), (2.0, self.op_flat), (1.0, self.op_split), (1.5, self.op_elementwise),
            (1.0, self.op_gemm), (1.5, self.op_norm3d), (1.5, self.op_fused),
        ]
        if numerics == "exact":
            ops.append((1.0, self.op_fp8_gemm))
        weights = [w for w, _ in ops]
        steps, tries = rng.randint(2, max(2, self.max_ops)), 0
        while steps > 0 and tries < 60:
            tries += 1
            if rng.choices(ops, weights)[0][1]():
                steps -= 1
        return Program(self.seed, numerics, profile, static, tuple(self.inputs), tuple(self.stmts),
                       self._outputs(), dict(self.vals), self.max_ops)

    def _outputs(self) -> tuple[str, ...]:
        """Every value no statement reads, and some that one does (fan-out to the graph's output), in the
        order ``compare_outputs`` reads them: activations, then (q, scale) pairs, then static q's."""
        used = {u for s in self.stmts for u in s.uses}
        produced = [n for s in self.stmts for n in s.outs]
        chosen = {n for n in produced if n not in used or self.rng.random() < 0.2}
        acts = [n for n in produced if n in chosen and self.vals[n].role == "act"]
        pairs = [(n, self.vals[n].scale) for n in produced if self.vals[n].role == "q"
                 and (n in chosen or self.vals[n].scale in chosen)]
        static = [n for n in produced if n in chosen and self.vals[n].role == "sq"]
        return (*acts, *(x for p in pairs for x in p if x is not None), *static)


def generate(seed: int, max_ops: int = MAX_OPS) -> Program:
    """The program of graph ``seed`` with 2 to ``max_ops`` ops: a function of its arguments alone."""
    return _Gen(seed, max_ops).generate()


# -- running one program --------------------------------------------------------------------------

def _tensor(shape: Sequence[int], dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale).to(dtype)


def make_inputs(p: Program, tokens: int, magnitude: float, seed: int) -> list[torch.Tensor]:
    """Activations at ``magnitude``, weights at 1, the static scale near what a calibrated one would be."""
    out: list[torch.Tensor] = []
    for k, i in enumerate(p.inputs):
        s = seed * 131 + k
        if i.kind == "act":
            out.append(_tensor((tokens, *i.shape), DTYPES[i.dtype], s, magnitude))
        elif i.kind == "scale":
            out.append(torch.full(i.shape, 0.5 / 240 * (0.5 + random.Random(s).random()), dtype=torch.float32))
        else:
            out.append(_tensor(i.shape, DTYPES[i.dtype], s))
    return out


def trace_program(p: Program) -> fx.GraphModule:
    f = p.function()
    example = make_inputs(p, TRACE_TOKENS, 1.0, p.seed)
    if p.static:
        return make_fx(f, tracing_mode="fake")(*example)
    return trace(f, *example)


@dataclass
class Outcome:
    """One graph's result: ``status`` ok, wrong, error or skipped (not generated)."""

    seed: int
    status: str
    stage: str = ""
    message: str = ""
    kernels: Counter[str] = field(default_factory=Counter)
    dropped: int = 0
    changed: bool = False
    searched: str = ""  # a range searched past a size its extraction lost at: "found" or "none"
    seconds: float = 0.0


def _head(exc: BaseException, lines: int = 6) -> str:
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    return "\n".join(text[-lines:])


def _fp32_exact(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], p: Program) -> None:
    """fp32 values that are not scales, which ``compare_outputs`` passes over in ``rounding``: bit-exact."""
    for k, name in enumerate(p.outputs):
        v = p.vals[name]
        if v.role == "act" and v.dtype == "fp32":
            assert torch.equal(got[k], want[k]), f"output {k} ({name}) differs"


def _runs(p: Program) -> list[tuple[int, float]]:
    return [(TRACE_TOKENS, m) for m in MAGNITUDES] if p.static else [(t, m) for m in MAGNITUDES for t in RUN_TOKENS]


def compare_graphs(p: Program, original: fx.GraphModule, gm: fx.GraphModule) -> tuple[str, str]:
    """Both graphs on fresh inputs (:func:`_runs`): ``("", "")`` when every output agrees, else the stage
    (``run``: the optimized graph raised; ``compare``) and the message. A run whose original outputs
    hold a NaN is left out (``torch.equal`` never holds there)."""
    for k, (tokens, magnitude) in enumerate(_runs(p)):
        fresh = make_inputs(p, tokens, magnitude, p.seed + 7 + k)
        where = f"tokens={tokens}, magnitude={magnitude:g}"
        want = original(*fresh)
        if any(t.dtype.is_floating_point and t.dtype.itemsize > 1 and bool(t.isnan().any()) for t in want):
            continue
        try:
            got = gm(*fresh)
        except Exception as exc:
            return "run", f"{where}: {_head(exc)}"
        try:
            compare_outputs(got, want, p.numerics, ROUNDING_TOL)
            _fp32_exact(got, want, p)
        except AssertionError as exc:
            if p.numerics != "rounding" or not closer_to_exact(p, fresh, got, want):
                return "compare", f"{where}: {exc}{_blame(p, str(exc))}"
    return "", ""


def closer_to_exact(p: Program, inputs: Sequence[torch.Tensor], got: Sequence[torch.Tensor],
                    want: Sequence[torch.Tensor]) -> bool:
    """Where the rewritten graph's fp8 values miss the original's by more than the tolerance: whether each
    is within the tolerance of where the original's are, measured from exact arithmetic (the program
    with every half-precision input in fp32, so no intermediate rounds). A fused kernel skips an
    intermediate rounding (the rounding contract); an fp16 intermediate below 6.1e-5 loses precision,
    and then the original, not the fused kernel, is the one off. bf16 outputs must still be bit-exact."""
    exact = p.function()(*[t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in inputs])
    exact = list(exact) if isinstance(exact, (tuple, list)) else [exact]
    got, want = list(got), list(want)
    k = 0
    while k < len(got):
        g, w = got[k], want[k]
        if g.dtype.itemsize != 1 or not g.dtype.is_floating_point:
            if g.dtype in (torch.float16, torch.bfloat16) and not torch.equal(g, w):
                return False
            k += 1
            continue
        scaled = k + 1 < len(got) and got[k + 1].dtype == torch.float32 and got[k + 1].dim() == g.dim()
        one = torch.ones(*g.shape[:-1], 1)
        sg, sw, se = (got[k + 1], want[k + 1], exact[k + 1]) if scaled else (one, one, one)
        group = g.shape[-1] // sg.shape[-1]
        if fp8_step_error(exact[k], se, g, sg, group) > fp8_step_error(exact[k], se, w, sw, group) + ROUNDING_TOL:
            return False
        k += 2 if scaled else 1
    return True


def _blame(p: Program, message: str) -> str:
    """`` [q6 from <op>]``: the output a ``compare_outputs`` message names, and the op that made it."""
    m = re.search(r"output (\d+)", message)
    if m is None or int(m.group(1)) >= len(p.outputs):
        return ""
    name = p.outputs[int(m.group(1))]
    op = next((s.op for s in p.stmts if name in s.outs), "input")
    return f" [{name} ({p.vals[name].dtype}) from {op}]"


def failure_kind(out: Outcome) -> str:
    """What failed, without the numbers: failures of one kind are one bug, most likely."""
    first = out.message.split("\nwithout strict")[0]
    lines = [line for line in first.splitlines() if line.strip()] or [""]
    if out.stage == "compare":
        m = re.search(r"\[\w+ \((\w+)\) from (.+)\]$", lines[-1])
        text = f"{m.group(1)} output of {m.group(2)}" if m else lines[-1]
    else:
        text = re.sub(r"\[[^\]]*\]", "[..]", lines[-1])
    text = re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "N", text)
    return f"{out.status} at {out.stage}: {text[:160]}"


def check_program(p: Program, keep: dict[str, Any] | None = None, *, retrace: bool = True) -> Outcome:
    """Trace, optimize (strict), lint, run and compare one program (see the module docstring).
    ``retrace``: the graph to optimize is a second trace; else ``eqsat.fx.capture.copy_graph`` of the first.

    When the strict pass raises, the graph is optimized again without ``strict`` (the warning path: a
    site emit cannot write is dropped, ``Report.dropped``, or the graph left alone) and that result is
    linted and compared too; the message says how it went, and a wrong fallback makes the graph wrong."""
    start = time.perf_counter()
    out = Outcome(p.seed, "ok")
    try:
        original = trace_program(p)
        original(*make_inputs(p, TRACE_TOKENS if p.static else RUN_TOKENS[0], 1.0, p.seed + 1))
    except Exception as exc:  # an input the stand-ins refuse: not a pass error
        out.status, out.stage, out.message = "skipped", "generate", f"{type(exc).__name__}: {str(exc)[:200]}"
        out.seconds = time.perf_counter() - start
        return out
    for strict in (True, False):
        stage = "trace"
        try:
            gm = trace_program(p) if retrace else copy_graph(original)
            stage = "optimize"
            report = eqsat.optimize(gm, profile=p.profile, sizes=p.sizes, strict=strict, numerics=p.numerics)
            out.kernels, out.dropped, out.changed = Counter(report.kernels_chosen), len(report.dropped), report.changed
            out.searched = "" if not report.range_search else \
                "found" if report.range_search.endswith(RANGE_FOUND) else "none"
            stage = "lint"
            gm.graph.lint()
        except Exception as exc:
            if strict:
                out.status, out.stage, out.message = "error", stage, _head(exc)
                continue
            out.message += f"\nwithout strict: {stage} raised too: {_head(exc, 2)}"
            break
        if keep is not None:
            keep.update(original=original, optimized=gm, report=report)
        bad, message = compare_graphs(p, original, gm)
        if strict:
            if bad:
                out.status, out.stage, out.message = "wrong", bad, message
            break
        dropped = f", dropped {len(report.dropped)} site(s)" if report.dropped else ""
        if bad:
            out.status = "wrong"
            out.message += f"\nwithout strict{dropped}: WRONG at {bad}: {message}"
        else:
            out.message += f"\nwithout strict{dropped}: kernels {dict(report.kernels_chosen)}, every output agrees"
    out.seconds = time.perf_counter() - start
    return out


# -- shrinking ------------------------------------------------------------------------------------

def _rename(p: Program, old: str, new: str) -> Program:
    pat = re.compile(rf"\b{re.escape(old)}\b")
    stmts = tuple(replace(s, expr=pat.sub(new, s.expr), uses=tuple(new if u == old else u for u in s.uses))
                  for s in p.stmts)
    outputs = tuple(dict.fromkeys(new if o == old else o for o in p.outputs))
    return replace(p, stmts=stmts, outputs=outputs)


def shrink(p: Program, fails: Callable[[Program], bool], budget: int = 80) -> Program:
    """A smaller program that still ``fails``: drop outputs (a q with its scale), bypass values (a value
    replaced by an earlier one of the same shape, dtype and role), drop what is then dead."""
    tries = 0

    def attempt(c: Program) -> bool:
        nonlocal tries
        tries += 1
        return bool(c.outputs) and fails(c)

    progress = True
    while progress and tries < budget:
        progress = False
        for name in list(p.outputs):
            if name not in p.outputs or p.vals[name].role == "s":
                continue
            drop = {name, p.vals[name].scale}
            c = p.restricted([o for o in p.outputs if o not in drop])
            if tries < budget and attempt(c):
                p, progress = c, True
        for s in list(reversed(p.stmts)):
            if len(s.outs) != 1 or s not in p.stmts or tries >= budget:
                continue
            v = p.vals[s.outs[0]]
            defined = [i.name for i in p.inputs] + [o for t in p.stmts[:p.stmts.index(s)] for o in t.outs]
            for other in [d for d in defined if d in p.vals and p.vals[d].sig() == v.sig()][-2:]:
                if v.role == "q":
                    continue
                c = _rename(p, v.name, other)
                c = c.restricted(c.outputs)
                if tries < budget and attempt(c):
                    p, progress = c, True
                    break
    return p


# -- the campaign ---------------------------------------------------------------------------------

@dataclass
class Summary:
    graphs: int = 0
    generated: int = 0
    skipped: int = 0
    changed: int = 0
    fused_sites: int = 0
    dropped: int = 0
    wrong: int = 0
    errors: int = 0
    searched: Counter[str] = field(default_factory=Counter)  # range searches (Outcome.searched) by what they found
    seconds: float = 0.0
    kernels: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    skip_reasons: Counter[str] = field(default_factory=Counter)
    by_mode: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[Outcome, Program, Program | None]] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)  # failure_kind -> graphs
    kind_seeds: dict[str, list[int]] = field(default_factory=dict)  # failure_kind -> the first seeds

    @property
    def rate(self) -> float:
        return self.graphs / self.seconds if self.seconds else 0.0

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("graphs drawn", str(self.graphs)),
            ("generated (traced and ran)", str(self.generated)),
            ("not generated (stand-ins refused)", str(self.skipped)),
            ("graphs changed by the pass", str(self.changed)),
            ("fused sites (sum of kernels_chosen)", str(self.fused_sites)),
            ("dropped sites (Report.dropped)", str(self.dropped)),
            ("range searches (Report.range_search): found / none", f"{self.searched['found']} / {self.searched['none']}"),
            ("wrong results", str(self.wrong)),
            ("internal errors", str(self.errors)),
            ("time", f"{self.seconds:.1f} s ({self.rate:.2f} graphs/s, {1e3 / max(self.rate, 1e-9):.0f} ms/graph)"),
        ]

    def table(self) -> str:
        rows = self.rows()
        rows += [(f"kernel {k}", str(n)) for k, n in sorted(self.kernels.items())]
        rows += [(f"mode {k}", str(n)) for k, n in sorted(self.by_mode.items())]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)

    def markdown(self, command: str, first: int = 10, revision: str = "") -> str:
        lines = ["# Random-graph fuzzer", "", "Generated by `benchmarks/fuzz.py` (its docstring says what is "
                 "generated and checked).", "", f"Command: `{command}`" + (f", at {revision}" if revision else ""),
                 "", "| measure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.rows()]
        lines += ["", "Kernels chosen (fused sites per kernel):", "", "| kernel | sites |", "|---|---|"]
        lines += [f"| {k} | {n} |" for k, n in sorted(self.kernels.items())] or ["| - | 0 |"]
        lines += ["", "Graphs per mode (numerics / profile / tracing: static, symbolic at 256, symbolic over RANGE):", "",
                  "| mode | graphs |", "|---|---|"]
        lines += [f"| {k} | {n} |" for k, n in sorted(self.by_mode.items())]
        lines += ["", "Ops generated:", "", "| op | statements |", "|---|---|"]
        lines += [f"| `{k}` | {n} |" for k, n in sorted(self.ops.items())]
        if self.skip_reasons:
            lines += ["", "Not generated, by reason:", "", "| reason | graphs |", "|---|---|"]
            lines += [f"| {k} | {n} |" for k, n in self.skip_reasons.most_common()]
        lines += ["", f"## Failures: {self.wrong} wrong, {self.errors} internal errors", ""]
        if not self.failures:
            lines.append("None.")
        else:
            lines += ["By kind (numbers and shapes blanked; the first seeds of each):", "",
                      "| kind | graphs | seeds |", "|---|---|---|"]
            lines += [f"| {k.replace('|', '/')} | {n} | {', '.join(map(str, self.kind_seeds[k]))} |"
                      for k, n in self.kinds.most_common()]
            lines += ["", f"The first failure of each kind (at most {first}):", ""]
        for out, prog, small in self.failures[:first]:
            lines += [f"### seed {out.seed}: {failure_kind(out)}", "",
                      f"Reproduce: `{prog.reproduce()}`", "",
                      prog.describe(), "", "```", out.message, "```", "", "Program:", "", "```python",
                      prog.source(), "```", ""]
            if small is not None and small.source() != prog.source():
                lines += ["Shrunk (fails the same way):", "", "```python", small.source(), "```", "",
                          small.describe(), ""]
        return "\n".join(lines) + "\n"


def fuzz(graphs: int, seed: int, *, max_ops: int = MAX_OPS, shrink_first: int = 0, retrace: bool = True,
         progress: Callable[[int, Summary], None] | None = None) -> Summary:
    """Graphs ``seed .. seed + graphs - 1`` of 2 to ``max_ops`` ops each; the first failure of each kind
    (:func:`failure_kind`) is kept, the first ``shrink_first`` of those shrunk; ``retrace`` as in
    :func:`check_program`. The ``eqsat`` logger is quieted to errors meanwhile (the fallback's warnings)."""
    _bind_namespace()
    logger = logging.getLogger("eqsat")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return _fuzz(graphs, seed, max_ops, shrink_first, retrace, progress)
    finally:
        logger.setLevel(level)


def _fuzz(graphs: int, seed: int, max_ops: int, shrink_first: int, retrace: bool,
          progress: Callable[[int, Summary], None] | None) -> Summary:
    summary = Summary()
    start = time.perf_counter()
    for i in range(graphs):
        p = generate(seed + i, max_ops)
        out = check_program(p, retrace=retrace)
        summary.graphs += 1
        summary.ops.update(s.op for s in p.stmts)
        if out.status == "skipped":
            summary.skipped += 1
            summary.skip_reasons[out.message.split(":")[0] + ": " + out.message.split(":", 1)[-1][:60].strip()] += 1
        else:
            summary.generated += 1
            tracing = "static" if p.static else "range" if p.sizes == RANGE else "symbolic"
            summary.by_mode[f"{p.numerics} / {p.profile} / {tracing}"] += 1
            summary.dropped += out.dropped  # of the strict run, or of the fallback where it raised
            if out.searched:
                summary.searched[out.searched] += 1
            if out.status != "error":
                summary.kernels.update(out.kernels)
                summary.fused_sites += sum(out.kernels.values())
                summary.changed += out.changed
        if out.status in ("wrong", "error"):
            summary.wrong += out.status == "wrong"
            summary.errors += out.status == "error"
            kind = failure_kind(out)
            summary.kinds[kind] += 1
            seeds = summary.kind_seeds.setdefault(kind, [])
            if len(seeds) < 10:
                seeds.append(p.seed)
            if summary.kinds[kind] == 1:  # the first failure of each kind is kept, and shrunk
                small = None
                if len(summary.failures) < shrink_first:
                    small = shrink(p, lambda c, kind=kind: failure_kind(check_program(c, retrace=retrace)) == kind)
                summary.failures.append((out, p, small))
        summary.seconds = time.perf_counter() - start
        if progress is not None:
            progress(i, summary)
    return summary


def _show(p: Program) -> None:
    print(p.describe())
    print(p.source())
    keep: dict[str, Any] = {}
    out = check_program(p, keep)
    if "original" in keep:
        print("--- before", keep["original"].code, "--- after", keep["optimized"].code, sep="\n")
        print(keep["report"].table())
    print(f"--- {out.status} {out.stage}\n{out.message}")


def revision() -> str:
    """The checkout's commit, and whether eqsat's sources differ from it (``git``; empty without it)."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "eqsat", "rewrites", "extract"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"commit {head}" + (" with local changes to eqsat/rewrites/extract" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write a markdown report here")
    parser.add_argument("--shrink", type=int, default=5, help="shrink the first K failures (default 5)")
    parser.add_argument("--show", action="store_true", help="print each program, both graphs and the report")
    parser.add_argument("--every", type=int, default=500, help="progress line (and report) every N graphs")
    parser.add_argument("--max-ops", type=int, default=MAX_OPS, help="ops per graph: 2 to this (default 8)")
    parser.add_argument("--copy", action="store_true",
                        help="optimize a copy_graph of the traced graph instead of a second trace (faster)")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.fuzz " + " ".join(sys.argv[1:] if argv is None else argv)
    at = revision()
    if args.show:
        _bind_namespace()
        for s in range(args.seed, args.seed + args.graphs):
            _show(generate(s, args.max_ops))
        return 0

    def progress(i: int, summary: Summary) -> None:
        if (i + 1) % args.every == 0 or i + 1 == args.graphs:
            print(f"[{i + 1}/{args.graphs}] {summary.fused_sites} fused sites, {summary.wrong} wrong, "
                  f"{summary.errors} errors, {summary.rate:.2f} graphs/s", flush=True)
            if args.out is not None:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(summary.markdown(command, revision=at))

    summary = fuzz(args.graphs, args.seed, max_ops=args.max_ops, shrink_first=args.shrink, retrace=not args.copy,
                   progress=progress)
    print(summary.table())
    for kind, n in summary.kinds.most_common():
        print(f"{n:6d}  {kind}  (seeds {', '.join(map(str, summary.kind_seeds[kind]))})")
    for out, _, small in summary.failures[:10]:
        print(f"\nseed {out.seed}: {out.status} at {out.stage}\n{out.message}")
        if small is not None:
            print(small.describe(), small.source(), sep="\n")
    if args.out is not None:
        args.out.write_text(summary.markdown(command, revision=at))
    return 1 if summary.wrong or summary.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
