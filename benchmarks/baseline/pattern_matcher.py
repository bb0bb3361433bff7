"""The peer: the fusion family eqsat covers, written the way vLLM 0.33.0 writes it, on Inductor's matcher.

``PatternMatcherBaseline()`` registers what vLLM registers on an MI300 (gfx942) with the AITER
fusions on and ``quant_fp8`` enabled (the ROCm default), ``reference/vllm-facts.md`` §1.2-1.3, §4.6,
§7: one ``register_replacement`` per pattern class and variant, in vLLM's order, in vLLM's four
``PatternMatcherPass``es, applied in the pass manager's order (§5.3):

1. ``rocm_aiter_triton_add_rmsnorm_pad_fusion_pass``, ``for eps in [1e-5, 1e-6]`` and pad multiple
   in (128, 256): ``pad`` (#11) fused-add norm feeding the router GEMM and ``F.pad`` of hidden 2880
   -> ``rocm_aiter_triton_add_rmsnorm_pad`` (+ the router GEMM on the unpadded slice). 4.
2. ``rocm_aiter_rms_norm_quant_fusion_pass``, ``for eps in [1e-5, 1e-6]``: ``double`` (#5),
   ``double_view`` (#6), ``rms_group`` (#3), ``add_rms_group`` (#4), ``rms_static`` (#8),
   ``add_rms_static`` (#9), then for the AITER and the ``_C`` per-token quant in turn ``rms_token``
   (#1) and ``add_rms_token`` (#2) (``..._c`` for the ``_C`` form), then ``gated`` (#7) per (heads,
   head_dim) of the Qwen3-Next GDN layers with head_dim 128 (one: 32 v-heads / TP 1 = 32 heads of
   128; the flat ``(T*H, D)`` layout only, as the quant op is not native). 2 x 11 = 22.
3. ``rocm_aiter_silu_mul_fp8_group_quant_fusion_pass``: ``silu`` (#10). 1.
4. ``mla_dual_rms_norm_fusion_pass``, ``for eps in [1e-5, 1e-6]``: ``mla_dual`` (#12),
   ``mla_dual_token`` (#13), ``mla_dual_group`` (#14); the last two match the *output* of pass 2
   on the q side, as vLLM's do. 6.

That is 33 registrations. Each replacement emits the fused vLLM op that vLLM's does (the one eqsat
picks for the same site). The unfused ops are spelled as the benchmark graphs spell them
(``benchmarks.graphs.models``): the AITER functional group / per-token quant, the static quant as
``auto_functionalized(rocm_aiter_per_tensor_quant)`` whose functionalized scale is a pattern output
(vLLM's ``MatcherQuantFP8`` does the same so the quant stays inside the match), the ``_C`` per-token
quant under ``auto_functionalized``, RMSNormGated native (fp8 models run it native, §4.4),
``torch.ops.eqsat.silu_and_mul`` (vLLM's matcher emits whichever form its graph holds).

Tracing as vLLM's: under ``FakeTensorMode`` (``@enable_fake_mode``; vLLM's pad pass traces real
small CUDA tensors, which on this CPU-only machine are fakes too) on vLLM's example shapes (bf16
``(5, 16)``; ``(5, 4)`` for silu; ``(2 H, D)`` for gated; ``(5, 8 + 4 + 2)`` and ``(5, 256 + 128 +
64)`` for MLA); ``pm.fwd_only`` where vLLM passes it, ``fwd_only`` + ``view_to_reshape`` for #6 and
the ``VllmFusionPatternMatcherPass`` passes (#10, #12-#14), and for #7 that plus folding consecutive
reshapes (vLLM's ``fold_consecutive_reshapes``).

Registration is done once per instance (``registration_s`` says how long it took);
``apply(gm)`` runs the four passes on a graph, then drops dead nodes (vLLM's ``post_cleanup``), and
returns the number of replacements. ``patterns=`` registers a subset (tests), ``epsilons=`` fewer
epsilons, ``gated_shapes=`` other (heads, head_dim) pairs.
"""

from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._higher_order_ops.auto_functionalize import auto_functionalized
from torch._inductor import pattern_matcher as pm
from torch._inductor.fx_passes.post_grad import view_to_reshape
from torch._subclasses.fake_tensor import FakeTensorMode

from benchmarks.graphs.models import _fp8, register_ops

EPSILONS = (1e-5, 1e-6)
GROUP = 128
GPT_OSS_HIDDEN = 2880  # vLLM hard-codes it (rocm_aiter_fusion.py L992-994)
PAD_MULTIPLES = (128, 256)  # gfx942, gfx950
QWEN3_NEXT_GDN = dict(num_v_heads=32, head_v_dim=128, tp=1)  # the benchmark graphs' GDN layers
GATED_SHAPES = ((QWEN3_NEXT_GDN["num_v_heads"] // QWEN3_NEXT_GDN["tp"], QWEN3_NEXT_GDN["head_v_dim"]),)

Fns = tuple[Callable[..., Any], Callable[..., Any], list[torch.Tensor]]  # search, replacement, inputs
TraceFn = Callable[..., fx.GraphModule]


# -- tracing ------------------------------------------------------------------------------------------


def reshape_trace(*args: Any, **kwargs: Any) -> fx.GraphModule:
    """vLLM's ``VllmFusionPatternMatcherPass._trace_fn``: ``fwd_only``, then views as reshapes."""
    gm = pm.fwd_only(*args, **kwargs)
    view_to_reshape(gm)
    return gm


def gated_trace(*args: Any, **kwargs: Any) -> fx.GraphModule:
    """#7's trace: ``reshape_trace``, then ``reshape(reshape(x, a), b)`` folded to ``reshape(x, b)``."""
    gm = reshape_trace(*args, **kwargs)
    reshape = torch.ops.aten.reshape.default
    for node in gm.graph.nodes:
        inner = node.args[0] if node.target is reshape else None
        if isinstance(inner, fx.Node) and inner.target is reshape:
            node.args = (inner.args[0], *node.args[1:])
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm


# -- the unfused and fused ops, as the benchmark graphs spell them ------------------------------------


def _empty(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype)


def quant(form: str, y: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale) of ``y`` by the quant of ``form`` (vLLM's ``MatcherQuantFP8`` for that key and form):
    ``group`` / ``token`` the AITER functional ops, ``token_c`` the ``_C`` per-token op and ``static``
    AITER's per-tensor op, both under ``auto_functionalized`` (the scale out is the functionalized
    ``scale``: the graph input's new value, for ``static``)."""
    vllm, fp8 = torch.ops.vllm, _fp8()
    if form == "group":
        q = vllm.rocm_aiter_group_fp8_quant.default(y, GROUP)
        return q[0], q[1]
    if form == "token":
        q = vllm.rocm_aiter_per_token_quant.default(y, fp8)
        return q[0], q[1]
    out = torch.empty(y.shape, dtype=fp8)
    if form == "token_c":
        r = auto_functionalized(torch.ops._C.dynamic_per_token_scaled_fp8_quant.default, result=out, input=y,
                                scale=torch.empty([*y.shape[:-1], 1], dtype=torch.float32), scale_ub=None)
    elif form == "static":
        r = auto_functionalized(vllm.rocm_aiter_per_tensor_quant.default, out=out, x=y, scale=scale,
                                is_dynamic=False)
    else:
        raise ValueError(f"unknown quant form {form!r}")
    return r[1], r[2]


def fused_norm_quant(form: str, add: bool, x: torch.Tensor, residual: torch.Tensor | None, w: torch.Tensor,
                     eps: float, scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(q, scale, residual_out or None) of AITER's rms_norm (+ add) + quant op for ``form``. The
    static ops return no scale: the input scale passes through, as in vLLM's replacement."""
    vllm, fp8 = torch.ops.vllm, _fp8()
    head = (x, residual, w) if add else (x, w)
    if form == "group":
        op = vllm.rocm_aiter_rmsnorm_with_add_fp8_group_quant if add else vllm.rocm_aiter_rmsnorm_fp8_group_quant
        out = op.default(*head, eps, GROUP)  # the add op returns (q, residual_out, scale)
    elif form in ("token", "token_c"):
        op = vllm.rocm_aiter_rmsnorm_fused_add_dynamic_quant if add else vllm.rocm_aiter_rmsnorm_fused_dynamic_quant
        out = op.default(*head, eps, fp8)  # the add op returns (q, residual_out, scale)
    else:
        assert scale is not None
        if not add:
            return vllm.rocm_aiter_fused_rms_fp8_per_tensor_static_quant.default(x, w, eps, scale, fp8), scale, None
        out = vllm.rocm_aiter_fused_add_rms_fp8_per_tensor_static_quant.default(*head, eps, scale, fp8)
        return out[0], scale, out[1]
    return (out[0], out[2], out[1]) if add else (out[0], out[1], None)


# -- the pattern classes ------------------------------------------------------------------------------


def _signed(names: Sequence[str], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(*args)`` with the named signature the matcher reads its pattern's argument names from."""
    fn.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
    return fn


def norm_quant(form: str, add: bool, eps: float) -> Fns:
    """#1-#4, #8, #9: ``rms_norm`` (or ``fused_add_rms_norm``, its residual out an output) -> quant."""
    vir = torch.ops.vllm_ir
    static = form == "static"
    names = ["x", "weight", *(["residual"] if add else []), *(["scale"] if static else [])]

    def unpack(args: Sequence[torch.Tensor]) -> tuple[Any, ...]:
        named = dict(zip(names, args, strict=True))
        return named["x"], named.get("residual"), named["weight"], named.get("scale")

    def search(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, residual, w, scale = unpack(args)
        if add:
            y, residual_out = vir.fused_add_rms_norm.default(x, residual, w, eps)
        else:
            y = vir.rms_norm.default(x, w, eps)
        q, s = quant(form, y, scale)
        return (q, s, residual_out) if add else (q, s)

    def replace(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, residual, w, scale = unpack(args)
        q, s, residual_out = fused_norm_quant(form, add, x, residual, w, eps, scale)
        return (q, s, residual_out) if add else (q, s)

    x = _empty(5, 16)
    inputs = [x, _empty(16), *([torch.empty_like(x)] if add else []),
              *([_empty(1, 1, dtype=torch.float32)] if static else [])]
    return _signed(names, search), _signed(names, replace), inputs


def double(view: bool, eps: float) -> Fns:
    """#5 / #6: one ``rms_norm`` (through ``view(-1, N)`` for #6) feeding exactly two group quants
    -> two fused calls (vLLM recomputes the norm rather than materialise it, L305-308)."""

    def search(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.ops.vllm_ir.rms_norm.default(x, w, eps)
        if view:
            y = y.view(-1, y.shape[-1])
        return (*quant("group", y), *quant("group", y))

    def replace(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t for _ in range(2) for t in fused_norm_quant("group", False, x, None, w, eps, None)[:2])

    return search, replace, [_empty(5, 16), _empty(16)]


def gated(heads: int, head_dim: int, eps: float) -> Fns:
    """#7: native RMSNormGated (norm before gate, swish, no group) -> ``reshape(-1, H*D)`` -> group
    quant -> ``rocm_aiter_fused_rms_gated_fp8_group_quant`` on ``(T*H, D)``, outputs reshaped back."""
    hidden = heads * head_dim

    def search(x: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()
        y = (y * F.silu(z.float())).to(x.dtype)
        return quant("group", y.reshape(-1, hidden))

    def replace(x: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.ops.vllm.rocm_aiter_fused_rms_gated_fp8_group_quant.default(
            x.reshape(-1, head_dim), w, None, z.reshape(-1, head_dim), eps, True, "silu", head_dim)
        return q[0].reshape(-1, hidden), q[1].reshape(-1, heads)

    x = _empty(2 * heads, head_dim)
    return search, replace, [x, torch.empty_like(x), _empty(head_dim)]


def silu() -> Fns:
    """#10: ``silu_and_mul`` -> group quant -> ``rocm_aiter_act_mul_and_fp8_group_quant``."""

    def search(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return quant("group", torch.ops.eqsat.silu_and_mul.default(x))

    def replace(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.ops.vllm.rocm_aiter_act_mul_and_fp8_group_quant.default(x, GROUP)
        return q[0], q[1]

    return search, replace, [_empty(5, 4)]


def pad(multiple: int, eps: float) -> Fns:
    """#11: fused-add norm whose output feeds the router GEMM and ``F.pad`` to a multiple of
    ``multiple`` (hidden 2880) -> ``rocm_aiter_triton_add_rmsnorm_pad``; the router reads the
    unpadded slice of its output."""
    vllm = torch.ops.vllm

    def search(x, w, residual, router_w, router_b):  # type: ignore[no-untyped-def]
        y, residual_out = torch.ops.vllm_ir.fused_add_rms_norm.default(x, residual, w, eps)
        logits = vllm.rocm_unquantized_gemm.default(y, router_w, router_b)
        return F.pad(y, (0, multiple - GPT_OSS_HIDDEN % multiple), value=0.0), residual_out, logits

    def replace(x, w, residual, router_w, router_b):  # type: ignore[no-untyped-def]
        padded, residual_out = vllm.rocm_aiter_triton_add_rmsnorm_pad.default(x, w, eps, residual, multiple)
        logits = vllm.rocm_unquantized_gemm.default(padded[:, :GPT_OSS_HIDDEN], router_w, router_b)
        return padded, residual_out, logits

    x = _empty(5, 16)
    return search, replace, [x, _empty(16), torch.empty_like(x), _empty(8, 16), _empty(8)]


def mla_dual(q_side: str, eps: float) -> Fns:
    """#12-#14: ``split([q, kv])``, ``split(kv, [kv_c, k_pe])``, the q latent's norm (``rms``: a
    ``rms_norm``; ``token`` / ``group``: pass 2's fused norm + per-token / group quant) and the kv
    latent's ``rms_norm`` -> ``fused_mla_dual_rms_norm[_per_token_quant|_group_quant]``. Split sizes
    come from the weights' shapes, so they generalise."""
    vllm = torch.ops.vllm

    def splits(projected: torch.Tensor, q_w: torch.Tensor, kv_w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q_dim, kv_c_dim = q_w.shape[0], kv_w.shape[0]
        q_c, kv_lora = projected.split([q_dim, projected.shape[-1] - q_dim], dim=-1)
        kv_c, k_pe = kv_lora.split([kv_c_dim, kv_lora.shape[-1] - kv_c_dim], dim=-1)
        return q_c, kv_c, k_pe

    def search(projected: torch.Tensor, q_w: torch.Tensor, kv_w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q_c, kv_c, k_pe = splits(projected, q_w, kv_w)
        kv = torch.ops.vllm_ir.rms_norm.default(kv_c, kv_w, eps)
        if q_side == "rms":
            return torch.ops.vllm_ir.rms_norm.default(q_c, q_w, eps), kv, k_pe
        q, s, _ = fused_norm_quant(q_side, False, q_c, None, q_w, eps, None)
        return q, s, kv, k_pe

    def replace(projected: torch.Tensor, q_w: torch.Tensor, kv_w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q_c, kv_c, k_pe = splits(projected, q_w, kv_w)
        if q_side == "rms":
            return (*vllm.fused_mla_dual_rms_norm.default(q_c, q_w, kv_c, kv_w, eps, eps), k_pe)
        if q_side == "token":
            out = vllm.fused_mla_dual_rms_norm_per_token_quant.default(q_c, q_w, kv_c, kv_w, eps, eps)
        else:
            out = vllm.fused_mla_dual_rms_norm_group_quant.default(q_c, q_w, kv_c, kv_w, eps, eps, GROUP, False)
        return out[0], out[1], out[2], k_pe

    q_dim, kv_c_dim, k_pe_dim = (8, 4, 2) if q_side == "rms" else (256, 128, 64)
    return search, replace, [_empty(5, q_dim + kv_c_dim + k_pe_dim), _empty(q_dim), _empty(kv_c_dim)]


# -- the table: vLLM's passes and registration order --------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """One pattern class of vLLM (``number`` of vllm-facts §1.2) in one quant form: the builder of
    its search / replacement / example inputs for one variant, and its trace function."""

    name: str
    number: int
    build: Callable[..., Fns]
    trace: TraceFn = pm.fwd_only


@dataclass(frozen=True)
class Pass:
    """One of vLLM's ``PatternMatcherPass``es: its patterns in registration order, inside a loop over
    eps when ``per_eps``."""

    name: str
    patterns: tuple[Pattern, ...]
    per_eps: bool = True


def _norm(name: str, number: int, form: str, add: bool) -> Pattern:
    return Pattern(name, number, lambda eps: norm_quant(form, add, eps))


PASSES = (  # the pass manager's order (vllm-facts §5.3)
    Pass("rocm_aiter_triton_add_rmsnorm_pad_fusion_pass", (Pattern("pad", 11, pad),)),
    Pass("rocm_aiter_rms_norm_quant_fusion_pass", (
        Pattern("double", 5, lambda eps: double(False, eps)),
        Pattern("double_view", 6, lambda eps: double(True, eps), reshape_trace),
        _norm("rms_group", 3, "group", False),
        _norm("add_rms_group", 4, "group", True),
        _norm("rms_static", 8, "static", False),
        _norm("add_rms_static", 9, "static", True),
        _norm("rms_token", 1, "token", False),  # match_aiter_quant=True
        _norm("add_rms_token", 2, "token", True),
        _norm("rms_token_c", 1, "token_c", False),  # match_aiter_quant=False
        _norm("add_rms_token_c", 2, "token_c", True),
        Pattern("gated", 7, gated, gated_trace),
    )),
    Pass("rocm_aiter_silu_mul_fp8_group_quant_fusion_pass", (Pattern("silu", 10, silu, reshape_trace),),
         per_eps=False),
    Pass("mla_dual_rms_norm_fusion_pass", tuple(
        Pattern(name, number, lambda eps, q=q: mla_dual(q, eps), reshape_trace)
        for name, number, q in (("mla_dual", 12, "rms"), ("mla_dual_token", 13, "token"),
                                ("mla_dual_group", 14, "group")))),
)
PATTERNS = tuple(p.name for pass_ in PASSES for p in pass_.patterns)


def variants(pattern: Pattern, eps: float | None, gated_shapes: Iterable[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """The builder arguments vLLM registers ``pattern`` with inside its loop over eps, in its order."""
    if pattern.name == "pad":
        return [(m, eps) for m in PAD_MULTIPLES]
    if pattern.name == "gated":
        return [(h, d, eps) for h, d in gated_shapes if d == GROUP]  # vLLM: head_dim 128 only
    return [(eps,)] if eps is not None else [()]


class PatternMatcherBaseline:
    """vLLM's four ``PatternMatcherPass``es for this family, registered once at construction."""

    def __init__(self, patterns: Iterable[str] = PATTERNS, epsilons: Sequence[float] = EPSILONS,
                 gated_shapes: Iterable[tuple[int, int]] = GATED_SHAPES) -> None:
        register_ops()
        wanted, shapes = set(patterns), tuple(gated_shapes)
        if wanted - set(PATTERNS):
            raise ValueError(f"unknown patterns {sorted(wanted - set(PATTERNS))}; choose from {PATTERNS}")
        self.passes = [pm.PatternMatcherPass(pass_name=p.name) for p in PASSES]
        self.registered: list[tuple[Pass, Pattern, tuple[Any, ...]]] = []  # in registration order
        start = time.perf_counter()
        with FakeTensorMode():  # vLLM's @enable_fake_mode
            for pm_pass, spec in zip(self.passes, PASSES, strict=True):
                for eps in epsilons if spec.per_eps else [None]:
                    for p in spec.patterns:
                        for args in variants(p, eps, shapes) if p.name in wanted else []:
                            pm.register_replacement(*p.build(*args), p.trace, pm_pass)
                            self.registered.append((spec, p, args))
        self.registration_s = time.perf_counter() - start

    @property
    def registrations(self) -> int:
        return len(self.registered)

    def describe(self) -> str:
        """The registrations per pass, e.g. ``mla_dual_rms_norm_fusion_pass: #12 mla_dual x2, ... (6)``."""
        parts = []
        for spec in PASSES:
            mine = [(p.number, p.name) for s, p, _ in self.registered if s is spec]
            if mine:
                counts = Counter(mine)
                parts.append(f"`{spec.name}`: " + ", ".join(f"#{n} {name} x{k}" for (n, name), k in counts.items())
                             + f" ({len(mine)})")
        return "; ".join(parts)

    def apply(self, gm: fx.GraphModule) -> int:
        """Run the passes on ``gm`` in place, in vLLM's order; the number of replacements."""
        count = sum(pm_pass.apply(gm.graph) for pm_pass in self.passes)
        gm.graph.eliminate_dead_code()  # vLLM's post_cleanup (the matcher leaves dead nodes)
        return count
