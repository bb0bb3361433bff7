"""Model-shaped post-grad graphs: the norm and quant parts of real decoder layers, in vLLM's ops.

Each builder captures the graph ``torch.compile(dynamic=True)`` hands a post-grad pass on CPU
(``compiled.post_grad_graph``: weights are a module's parameters, the token dim the one symbol):
vLLM's ops (``vllm_ir.rms_norm`` / ``fused_add_rms_norm``, ``vllm.rocm_aiter_group_fp8_quant``
with G = 128, ...), ``meta["val"]`` fake tensors, a ``tokens`` symbol placeholder, weights as
placeholders, Inductor's decompositions, views as ``reshape`` and no-op views dropped.
GEMMs, attention and MoE are opaque stand-ins (namespace ``eqsat_bench``) so they stay leaves.

- ``deepseek_v3(layers)``: DeepSeek-V3 (fp8 block quant, TP 8) decoder layers, residual stream
  chained: fused-add input norm -> group quant -> fused qkv_a GEMM; split [1536, 512 + 64];
  q_a norm -> group quant -> q_b GEMM; kv_a norm on the 512 part (a split view); MLA attention;
  group quant -> o_proj; post-attention fused-add norm -> group quant -> gate_up GEMM;
  silu_and_mul -> group quant -> down GEMM (the dense MLP of layers 0-2, the shared expert of the
  MoE layers). One layer is captured, the rest are node copies (61 layers build in about 1 s).
- ``deepseek_v3_moe(layers)``: the same with the MoE block: the post-attention normed output
  also feeds the router GEMM and the routed experts in bf16 (three consumers, not one).
- ``deepseek_v32_indexer()``: one rms_norm whose output feeds two group quants, the DeepSeek-V3.2
  indexer's q_c (the model's ``view(-1, 1536)`` between them is a no-op Inductor drops before
  post-grad passes, so this is vLLM pattern #5's graph, not #6's).
- vLLM patterns #7, #1/#2/#8/#9 and #11, written in vLLM's spelling (a catalog without a kernel
  for one honestly reports 0 fusions there): ``qwen3_next_gated_norm(layout)`` (native
  RMSNormGated -> reshape -> group quant, both head layouts; fp8 models run the gated norm native,
  so there is no ``fla_rms_norm_gated`` node), ``llama_fp8_static()`` / ``llama_fp8_per_token()``
  (fused-add norm -> static per-tensor / dynamic per-token quant, as
  ``auto_functionalized(rocm_aiter_per_tensor_quant)`` / ``rocm_aiter_per_token_quant``, whose q
  and scale the GEMM reads), ``gpt_oss_router_pad()`` (fused-add norm -> router GEMM + pad to 2944).

``GRAPHS`` names every single-graph builder. Stand-in ops are defined once per process and never
override an op that already exists (e.g. when the real vLLM is imported).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

import eqsat  # noqa: F401  (registers torch.ops.eqsat.*, e.g. silu_and_mul)
from benchmarks.graphs.compiled import Spec, post_grad_graph
from eqsat.kernels.torch_ops import register_vllm_standins
from eqsat.library.define import define_op
from eqsat.library.vllm import standin_fp8_dtype

BF16, F32 = torch.bfloat16, torch.float32
G = 128
TOKENS_HINT = 8
_LIBS: dict[str, torch.library.Library] = globals().get("_LIBS", {})


# -- opaque stand-ins ---------------------------------------------------------------------------------


def _fp8() -> torch.dtype:
    return standin_fp8_dtype() or torch.float8_e4m3fnuz


def _out(x: torch.Tensor, n: Any, dtype: torch.dtype = BF16) -> torch.Tensor:
    return x.new_empty([*x.shape[:-1], n], dtype=dtype)


def _dequant(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (q.float().unflatten(-1, (-1, G)) * s.unsqueeze(-1)).flatten(-2)


def register_ops() -> None:
    """vLLM's stand-ins, the opaque ``eqsat_bench::*`` leaves, and the vLLM ops the graphs need that
    ``register_vllm_standins`` may not define (each defined only if missing)."""
    register_vllm_standins()
    bench = [
        ("fp8_gemm(Tensor x, Tensor x_scale, Tensor w) -> Tensor",  # W8A8 block-scaled GEMM, bf16 out
         lambda x, s, w: (_dequant(x, s) @ w.float().t()).to(BF16), lambda x, s, w: _out(x, w.shape[0])),
        ("gemm(Tensor x, Tensor w) -> Tensor",  # fp8 per-tensor GEMM (scales folded), bf16 out
         lambda x, w: (x.float() @ w.float().t()).to(BF16), lambda x, w: _out(x, w.shape[0])),
        ("scaled_gemm(Tensor x, Tensor x_scale, Tensor w) -> Tensor",  # fp8 per-token GEMM, bf16 out
         lambda x, s, w: ((x.float() * s) @ w.float().t()).to(BF16), lambda x, s, w: _out(x, w.shape[0])),
        ("mla_attention(Tensor q, Tensor kv_c, Tensor k_pe, SymInt heads) -> Tensor",
         lambda q, kv, pe, h: q.new_zeros([q.shape[0], h * 128]), lambda q, kv, pe, h: _out(q, h * 128)),
        ("attention(Tensor qkv, SymInt out) -> Tensor",
         lambda qkv, n: qkv.new_zeros([qkv.shape[0], n]), lambda qkv, n: _out(qkv, n)),
        ("fused_moe(Tensor x, Tensor router_logits) -> Tensor",
         lambda x, r: x.clone(), lambda x, r: x.new_empty(x.shape)),
        ("gdn_core(Tensor x, SymInt heads, SymInt head_dim) -> (Tensor, Tensor)",
         lambda x, h, d: (x.new_zeros([x.shape[0] * h, d]),) * 2,
         lambda x, h, d: (x.new_empty([x.shape[0] * h, d]), x.new_empty([x.shape[0] * h, d]))),
    ]
    for schema, impl, fake in bench:
        define_op(_LIBS, "eqsat_bench", schema, impl, fake)
    vllm = [  # exact vLLM 0.33.0 schemas (reference/vllm-facts.md §3.1)
        ("rocm_unquantized_gemm(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor",
         lambda x, w, b=None: F.linear(x, w, b), lambda x, w, b=None: _out(x, w.shape[0], x.dtype)),
        ("rocm_aiter_per_token_quant(Tensor x, ScalarType quant_dtype, Tensor? scale=None) -> (Tensor, Tensor)",
         _per_token_quant, lambda x, dt, scale=None: (x.new_empty(x.shape, dtype=dt), _out(x, 1, F32))),
        ("rocm_aiter_per_tensor_quant(Tensor(a0!) out, Tensor x, Tensor(a2!) scale, bool is_dynamic) -> ()",
         _per_tensor_quant, lambda out, x, scale, dyn: None),
    ]
    for schema, impl, fake in vllm:
        define_op(_LIBS, "vllm", schema, impl, fake)


def _per_token_quant(x: torch.Tensor, dt: torch.dtype, scale: torch.Tensor | None = None) -> Any:
    fmax = torch.finfo(dt).max
    s = (x.float().abs().amax(-1, keepdim=True) / fmax).clamp_min(1e-10)
    return (x.float() / s).clamp(-fmax, fmax).to(dt), s


def _per_tensor_quant(out: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, is_dynamic: bool) -> None:
    fmax = torch.finfo(out.dtype).max
    if is_dynamic:
        scale.copy_((x.float().abs().amax() / fmax).clamp_min(1e-10).reshape(scale.shape))
    out.copy_((x.float() / scale).clamp(-fmax, fmax).to(out.dtype))


# -- tracing ------------------------------------------------------------------------------------------

def tok(*shape: int, dtype: torch.dtype = BF16) -> Spec:
    """An activation ``[tokens, *shape]``."""
    return (shape, dtype, True)


def weight(*shape: int, dtype: torch.dtype = BF16) -> Spec:
    return (shape, dtype, False)


def trace(f: Callable[..., object], specs: Sequence[Spec]) -> fx.GraphModule:
    """The graph ``torch.compile(f, dynamic=True)`` hands a post-grad pass (``compiled.post_grad_graph``):
    weights static, the token dim symbolic, placeholders named as ``f``'s parameters after a leading
    ``tokens`` symbol."""
    register_ops()
    return post_grad_graph(f, specs, TOKENS_HINT)


def stack(layer: fx.GraphModule, layers: int, carried: int) -> fx.GraphModule:
    """``layers`` copies of ``layer`` chained: the first ``carried`` outputs of copy i are the first
    ``carried`` tensor inputs of copy i + 1 (the residual stream); the symbol placeholders are shared
    and every other input (the weights) is a fresh placeholder per copy. Nodes are copied with their
    meta (fake values shared)."""
    graph = fx.Graph()
    placeholders = [n for n in layer.graph.nodes if n.op == "placeholder"]
    symbols = [p for p in placeholders if isinstance(p.meta.get("val"), torch.SymInt)]
    tensors = [p for p in placeholders if p not in symbols]
    shared: dict[fx.Node, fx.Node] = {}
    for p in symbols:
        shared[p] = graph.placeholder(p.name)
        shared[p].meta = dict(p.meta)
    carry: list[fx.Node] = []
    outputs: list[Any] = []
    for i in range(layers):
        env = dict(shared)
        for k, ph in enumerate(tensors):
            if k < carried and carry:
                env[ph] = carry[k]
            else:
                env[ph] = graph.placeholder(f"{ph.name}_l{i}" if k >= carried else ph.name)
                env[ph].meta = dict(ph.meta)
        for node in layer.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                outputs = list(fx.map_arg(node.args[0], env.__getitem__))
            else:
                env[node] = graph.node_copy(node, env.__getitem__)
        carry = outputs[:carried]
    graph.output(tuple(outputs))
    return fx.GraphModule(layer, graph)


# -- DeepSeek-V3 --------------------------------------------------------------------------------------

DSV3 = dict(hidden=7168, q_lora=1536, kv_lora=512, rope=64, heads=128, qk_head=192, inter=18432,
            shared_inter=2048, experts=256, eps=1e-6)


def _ops() -> tuple[Any, Any, Any]:
    register_ops()
    return torch.ops.vllm, torch.ops.vllm_ir, torch.ops.eqsat_bench


def deepseek_v3_layer(tp: int = 8, moe: bool = False) -> fx.GraphModule:
    """One DeepSeek-V3 decoder layer (see the module docstring); inputs (x, residual, weights...),
    outputs (mlp_out, residual)."""
    vllm, vir, bench = _ops()
    c = DSV3
    hidden, eps, heads = c["hidden"], c["eps"], c["heads"] // tp
    inter = (c["shared_inter"] if moe else c["inter"]) // tp
    quant = vllm.rocm_aiter_group_fp8_quant

    def dense(x, residual, w_in, w_qkv_a, w_qa, w_kva, w_qb, w_o, w_post, w_gu, w_down):
        h, residual = vir.fused_add_rms_norm(x, residual, w_in, eps)
        qkv = bench.fp8_gemm(*quant(h, G), w_qkv_a)
        q_c, kv_lora = qkv.split([c["q_lora"], c["kv_lora"] + c["rope"]], dim=-1)
        kv_c, k_pe = kv_lora.split([c["kv_lora"], c["rope"]], dim=-1)
        q = bench.fp8_gemm(*quant(vir.rms_norm(q_c, w_qa, eps), G), w_qb)
        attn = bench.mla_attention(q, vir.rms_norm(kv_c, w_kva, eps), k_pe, heads)
        o = bench.fp8_gemm(*quant(attn, G), w_o)
        h2, residual = vir.fused_add_rms_norm(o, residual, w_post, eps)
        gate_up = bench.fp8_gemm(*quant(h2, G), w_gu)
        out = bench.fp8_gemm(*quant(torch.ops.eqsat.silu_and_mul(gate_up), G), w_down)
        return out, residual, h2

    def layer(x, residual, w_in, w_qkv_a, w_qa, w_kva, w_qb, w_o, w_post, w_gu, w_down):
        return dense(x, residual, w_in, w_qkv_a, w_qa, w_kva, w_qb, w_o, w_post, w_gu, w_down)[:2]

    def moe_layer(x, residual, w_in, w_qkv_a, w_qa, w_kva, w_qb, w_o, w_post, w_gu, w_down, w_router):
        shared, residual, h2 = dense(x, residual, w_in, w_qkv_a, w_qa, w_kva, w_qb, w_o, w_post, w_gu, w_down)
        return shared + bench.fused_moe(h2, vllm.rocm_unquantized_gemm(h2, w_router)), residual

    fp8 = _fp8()
    specs = [tok(hidden), tok(hidden), weight(hidden), weight(c["q_lora"] + c["kv_lora"] + c["rope"], hidden, dtype=fp8),
             weight(c["q_lora"]), weight(c["kv_lora"]), weight(heads * c["qk_head"], c["q_lora"], dtype=fp8),
             weight(hidden, heads * 128, dtype=fp8), weight(hidden), weight(2 * inter, hidden, dtype=fp8),
             weight(hidden, inter, dtype=fp8)]
    if moe:
        specs.append(weight(c["experts"], hidden))
    return trace(moe_layer if moe else layer, specs)


def deepseek_v3(layers: int = 1, tp: int = 8) -> fx.GraphModule:
    return stack(deepseek_v3_layer(tp), layers, carried=2)


def deepseek_v3_moe(layers: int = 1, tp: int = 8) -> fx.GraphModule:
    return stack(deepseek_v3_layer(tp, moe=True), layers, carried=2)


def deepseek_v32_indexer(eps: float = 1e-6) -> fx.GraphModule:
    """q_c -> rms_norm -> view(-1, 1536) (dropped by Inductor) -> two group quants (q_b_proj and the
    indexer's wq_b)."""
    vllm, vir, bench = _ops()
    q_lora = DSV3["q_lora"]
    fp8 = _fp8()

    def f(q_c, w, w_qb, w_idx):
        y = vir.rms_norm(q_c, w, eps).view(-1, q_lora)
        return (bench.fp8_gemm(*vllm.rocm_aiter_group_fp8_quant(y, G), w_qb),
                bench.fp8_gemm(*vllm.rocm_aiter_group_fp8_quant(y, G), w_idx))

    return trace(f, [tok(q_lora), weight(q_lora), weight(16 * 192, q_lora, dtype=fp8),
                     weight(64 * 128, q_lora, dtype=fp8)])


def deepseek_v32_indexer_3d(eps: float = 1e-6) -> fx.GraphModule:
    """The same fan-out over a 3-D norm input: ``[tokens, 2, 1536]`` normed, viewed ``(-1, 1536)`` (a
    real view, which Inductor keeps), two group quants: what vLLM's view pattern #6 is for and crashes
    on (its fakes are 2-D)."""
    vllm, vir, bench = _ops()
    q_lora = DSV3["q_lora"]
    fp8 = _fp8()

    def f(q_c, w, w_qb, w_idx):
        y = vir.rms_norm(q_c, w, eps).view(-1, q_lora)
        return (bench.fp8_gemm(*vllm.rocm_aiter_group_fp8_quant(y, G), w_qb),
                bench.fp8_gemm(*vllm.rocm_aiter_group_fp8_quant(y, G), w_idx))

    return trace(f, [tok(2, q_lora), weight(q_lora), weight(16 * 192, q_lora, dtype=fp8),
                     weight(64 * 128, q_lora, dtype=fp8)])


# -- outside the baseline's family --------------------------------------------------------------------


def qwen3_next_gated_norm(layout: str = "flat", heads: int = 32, head_dim: int = 128, hidden: int = 2048,
                          eps: float = 1e-6) -> fx.GraphModule:
    """Qwen3-Next GDN output (32 value heads of 128, TP 1) in a head layout: rows ``(T*H, D)``
    (``"flat"``, as Qwen3-Next's layer writes it) or ``(T, H, D)`` (``"3d"``, the core's rows viewed
    per token): native RMSNormGated (fp8 models run it native, vllm-facts §4.4-4.5: fp32 norm, times
    w, times silu(z) as neg/exp/add/div, cast) -> reshape(-1, H*D) -> group quant -> out_proj."""
    if layout not in ("flat", "3d"):
        raise ValueError(f"layout must be 'flat' or '3d', got {layout!r}")
    vllm, _, bench = _ops()
    fp8 = _fp8()

    def f(x, w_norm, w_out):
        core, z = bench.gdn_core(x, heads, head_dim)
        if layout == "3d":
            core, z = core.reshape(-1, heads, head_dim), z.reshape(-1, heads, head_dim)
        x32, z32 = core.float(), z.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w_norm.float()
        y = (y * (z32 / (1 + torch.exp(-z32)))).to(BF16).reshape(-1, heads * head_dim)  # silu as Inductor spells it
        return bench.fp8_gemm(*vllm.rocm_aiter_group_fp8_quant(y, G), w_out)

    return trace(f, [tok(hidden), weight(head_dim), weight(hidden, heads * head_dim, dtype=fp8)])


def qwen3_next_gated_norm_3d() -> fx.GraphModule:
    return qwen3_next_gated_norm("3d")


LLAMA = dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336, eps=1e-5)


def _llama(quant: Callable[..., Any]) -> fx.GraphModule:
    """A Llama layer; ``quant(x, scale)`` is a tensor (static: the GEMM folds the scale) or a
    ``(q, per-token scale)`` pair, both read by the GEMM as vLLM's fp8 linear reads them."""
    vllm, vir, bench = _ops()

    def gemm(a: Any, w: torch.Tensor) -> torch.Tensor:
        return bench.scaled_gemm(*a, w) if isinstance(a, tuple) else bench.gemm(a, w)

    c = LLAMA
    hidden, eps = c["hidden"], c["eps"]
    qkv_out = (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
    fp8 = _fp8()

    def f(x, residual, w_in, s_qkv, w_qkv, s_o, w_o, w_post, s_gu, w_gu, s_down, w_down):
        h, residual = vir.fused_add_rms_norm(x, residual, w_in, eps)
        attn = bench.attention(gemm(quant(h, s_qkv), w_qkv), c["heads"] * c["head_dim"])
        o = gemm(quant(attn, s_o), w_o)
        h2, residual = vir.fused_add_rms_norm(o, residual, w_post, eps)
        gate_up = gemm(quant(h2, s_gu), w_gu)
        out = gemm(quant(torch.ops.eqsat.silu_and_mul(gate_up), s_down), w_down)
        return out, residual

    scale = weight(1, 1, dtype=F32)
    return trace(f, [tok(hidden), tok(hidden), weight(hidden), scale, weight(qkv_out, hidden, dtype=fp8),
                     scale, weight(hidden, hidden, dtype=fp8), weight(hidden), scale,
                     weight(2 * c["inter"], hidden, dtype=fp8), scale, weight(hidden, c["inter"], dtype=fp8)])


def llama_fp8_static() -> fx.GraphModule:
    """Llama-3-8B FP8 (static per-tensor activation scales) layer: each quant is vLLM's
    ``rocm_aiter_per_tensor_quant(out, x, scale, False)`` into an empty ``out``, which
    functionalization turns into ``auto_functionalized`` and a copy of each (schema-"mutated") scale
    back into its parameter at the end of the graph (vllm-facts §0)."""
    fp8 = _fp8()

    def quant(x, scale):
        out = torch.empty(x.shape, dtype=fp8)
        torch.ops.vllm.rocm_aiter_per_tensor_quant(out, x, scale, False)
        return out

    return _llama(quant)


def llama_fp8_per_token() -> fx.GraphModule:
    """Llama-3-8B FP8-dynamic (per-token activation scales) layer: ``rocm_aiter_per_token_quant``,
    its q and scale both read by the GEMM."""
    fp8 = _fp8()
    return _llama(lambda x, scale: tuple(torch.ops.vllm.rocm_aiter_per_token_quant(x, fp8)))


def gpt_oss_router_pad(hidden: int = 2880, experts: int = 128, multiple: int = 128, eps: float = 1e-5) -> fx.GraphModule:
    """gpt-oss post-attention: fused-add norm whose output feeds the router GEMM and
    ``F.pad`` to a multiple of 128 (gfx942) for the MoE (vLLM pattern #11)."""
    vllm, vir, bench = _ops()
    pad = -hidden % multiple

    def f(x, residual, w, w_router, b_router):
        h, residual = vir.fused_add_rms_norm(x, residual, w, eps)
        logits = vllm.rocm_unquantized_gemm(h, w_router, b_router)
        return bench.fused_moe(F.pad(h, (0, pad), value=0.0), logits), residual

    return trace(f, [tok(hidden), tok(hidden), weight(hidden), weight(experts, hidden), weight(experts)])


GRAPHS: dict[str, Callable[[], fx.GraphModule]] = {
    "deepseek_v3 (1 layer)": deepseek_v3,
    "deepseek_v3 MoE (1 layer)": deepseek_v3_moe,
    "deepseek_v3.2 indexer": deepseek_v32_indexer,
    "deepseek_v3.2 indexer (3-D)": deepseek_v32_indexer_3d,
    "qwen3_next gated norm": qwen3_next_gated_norm,
    "qwen3_next gated norm (3-D)": qwen3_next_gated_norm_3d,
    "llama fp8 static": llama_fp8_static,
    "llama fp8 per-token": llama_fp8_per_token,
    "gpt-oss router + pad": gpt_oss_router_pad,
}
